"""What `python -m bench.hostile` samples of the leader from outside, for the whole run: /healthz's answer times
(from a thread of its own, so nothing the bench's event loop does delays a probe), the Lease's renewals, and the
process's RSS, which stops the flood when it passes the bench's --rss-abort."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import threading
import time
from pathlib import Path

from bench.hostile_figures import LeaseSeen, Probe
from mpiop.kube.client import ApiError, KubeClient
from mpiop.leader import LEASES, parse_micro_time


class HealthPoller:
    """GET /healthz on 127.0.0.1:`port` every `every` seconds (one at a time: a stalled loop shows as one slow
    answer, the longest stall it had), each given up after `timeout`."""

    def __init__(self, port: int, every: float = 0.05, timeout: float = 60.0) -> None:
        self.port, self.every, self.timeout = port, every, timeout
        self.probes: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def probe(self) -> Probe:
        sent = time.monotonic()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            return Probe(sent, time.monotonic() - sent, response.status)
        except (OSError, http.client.HTTPException):
            return Probe(sent, None)
        finally:
            connection.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            probe = self.probe()
            self.probes.append(probe)
            self._stop.wait(max(0.0, probe.sent + self.every - time.monotonic()))


class LeaseWatch:
    """The Lease read every `every` seconds; each new renewTime (or holder) kept, in order."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, every: float = 0.2) -> None:
        self.kube, self.namespace, self.name, self.every = kube, namespace, name, every
        self.seen: list[LeaseSeen] = []
        self.errors = 0

    async def run(self) -> None:
        while True:
            try:
                lease = await self.kube.get(LEASES, self.namespace, self.name)
            except (ApiError, OSError, TimeoutError):
                self.errors += 1
            else:
                spec = lease.get("spec") or {}
                if spec.get("renewTime"):
                    seen = LeaseSeen(parse_micro_time(spec["renewTime"]).timestamp(),
                                     str(spec.get("holderIdentity") or ""), int(spec.get("leaseTransitions") or 0))
                    if not self.seen or self.seen[-1] != seen:
                        self.seen.append(seen)
            await asyncio.sleep(self.every)


def status_mb(pid: int, key: str) -> float | None:
    """A /proc/<pid>/status figure in MB (VmRSS, VmHWM); None once the process is gone."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return float(line.split()[1]) / 1024
    return None


class RssWatch:
    """The process's RSS every `every` seconds; `over` is set once it passes `abort_mb`, `gone` once it exits."""

    def __init__(self, pid: int, abort_mb: float, every: float = 0.1) -> None:
        self.pid, self.abort_mb, self.every = pid, abort_mb, every
        self.samples: list[tuple[float, float]] = []
        self.peak_hwm = 0.0
        self.over = asyncio.Event()
        self.gone = asyncio.Event()
        self.gone_at: float | None = None

    def sample(self) -> None:
        rss, hwm = status_mb(self.pid, "VmRSS"), status_mb(self.pid, "VmHWM")
        if rss is None:
            if not self.gone.is_set():
                self.gone_at = time.monotonic()
                self.gone.set()
            return
        self.samples.append((time.monotonic(), rss))
        self.peak_hwm = max(self.peak_hwm, hwm or 0.0)
        if rss > self.abort_mb:
            self.over.set()

    async def run(self) -> None:
        while not self.gone.is_set():
            self.sample()
            await asyncio.sleep(self.every)
