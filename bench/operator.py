"""The operator as the bench runs it: `mpiop run` in its own process (bench/operator_main.py adds a /metrics
endpoint), so its RSS and CPU are its own and every request it makes is counted by its own request observer;
its metrics parsed, and a py-spy profile summed up."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.cpu import cpu_seconds
from devcluster.controlplane import _die_with_parent, free_port

JSON = dict[str, Any]
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
ROOT = Path(__file__).resolve().parents[1]


# -- the operator process ------------------------------------------------------------------------------
@dataclass
class Metrics:
    """A scrape of the operator's /metrics: requests by (verb, resource, code), reconciles, watch restarts."""

    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    reconciles: float = 0.0
    queue_depth: float = 0.0
    watch_restarts: Counter[str] = field(default_factory=Counter)  # by resource: streams the apiserver closed

    def total(self) -> int:
        return int(sum(self.requests.values()))

    def writes(self) -> int:
        return int(sum(n for (verb, _, _), n in self.requests.items() if verb in WRITE_VERBS))

    def by_verb(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for (verb, resource, _), n in self.requests.items():
            counts[f"{verb} {resource}"] += int(n)
        return counts

    def __sub__(self, other: Metrics) -> Metrics:
        diff = Counter(self.requests)
        diff.subtract(other.requests)
        restarts = Counter(self.watch_restarts)
        restarts.subtract(other.watch_restarts)
        return Metrics(+diff, self.reconciles - other.reconciles, self.queue_depth, +restarts)


def parse_metrics(text: str) -> Metrics:
    metrics = Metrics()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mpiop_api_requests_total":
                labels = sample.labels
                metrics.requests[(labels["verb"], labels["resource"], labels["code"])] += int(sample.value)
            elif sample.name == "mpiop_reconcile_duration_seconds_count":
                metrics.reconciles += sample.value
            elif sample.name == "mpiop_workqueue_depth":
                metrics.queue_depth = sample.value
            elif sample.name == "mpiop_watch_restarts_total":
                metrics.watch_restarts[sample.labels["resource"]] += int(sample.value)
    return metrics


class OperatorProcess:
    """`mpiop run --kubeconfig K [args]` as a child process (dies with the bench), with its /metrics."""

    def __init__(self, kubeconfig: Path, log: Path, args: Iterable[str] = (), profile: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.args = list(args)
        self.profile = profile
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.spy: subprocess.Popen[bytes] | None = None
        self.spawned_wall = 0.0
        self.spawned = 0.0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self.port = free_port()
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        argv = [sys.executable, "-m", "bench.operator_main", str(self.port), "--kubeconfig", str(self.kubeconfig),
                "--log-format", "json", *self.args]
        with self.log.open("ab") as out:
            self.spawned_wall, self.spawned = time.time(), time.monotonic()
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=_die_with_parent, cwd=ROOT)
        if self.profile is not None:
            # py-spy (pip install py-spy; not a dependency) samples the operator from outside, 100 times a second.
            spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
            if spy is None:
                raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
            self.spy = subprocess.Popen([spy, "record", "--pid", str(self.process.pid), "--rate", "100", "--format",
                                         "raw", "--nonblocking", "--output", str(self.profile)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=_die_with_parent)

    def _log_lines(self) -> list[JSON]:
        with self.log.open("rb") as handle:
            handle.seek(self._log_offset)
            data = handle.read()
        lines = []
        for line in data.splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines

    async def wait_synced(self, timeout: float = 120.0) -> tuple[float, float]:
        """(seconds from spawn to `caches synced` by its log timestamp, the manager's own sync seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"operator exited with {self.process.returncode}; see {self.log}")
            for line in self._log_lines():
                if line.get("event") == "caches synced":
                    stamp = dt.datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00"))
                    return stamp.timestamp() - self.spawned_wall, float(line.get("seconds", 0.0))
            await asyncio.sleep(0.02)
        raise TimeoutError(f"operator caches not synced after {timeout}s; see {self.log}")

    async def metrics(self) -> Metrics:
        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
                return str(response.read().decode())

        return parse_metrics(await asyncio.to_thread(scrape))

    async def wait_metrics(self, timeout: float = 60.0) -> Metrics:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await self.metrics()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    def status_kb(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return float(line.split()[1])
        return 0.0

    def rss_mb(self) -> float:
        return self.status_kb("VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        return self.status_kb("VmHWM") / 1024

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    async def settle(self, quiet: float = 2.0, timeout: float = 600.0, min_reconciles: float = 0) -> Metrics:
        """Wait until the operator makes no request for `quiet` seconds (and reconciled at least so many).

        Scraped once a second: /metrics computes per-job gauges at scrape time, and scraping much more often
        than Prometheus would (15-30 s) would add measurable work to the operator under test.
        """
        deadline = time.monotonic() + timeout
        last = await self.metrics()
        since = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            now = await self.metrics()
            if now.total() != last.total() or now.reconciles < min_reconciles or now.queue_depth > 0:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return now
        raise TimeoutError(f"operator not quiet after {timeout}s")

    def stop(self, grace: float = 30.0) -> None:
        if self.spy is not None and self.spy.poll() is None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.spy.wait(timeout=30)
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# -- the bench's view of a namespace --------------------------------------------------------------------
def profile_summary(raw: Path, top: int = 12) -> list[str]:
    """The functions py-spy saw on CPU most (self time), and the mpiop/aiohttp frames most on the stack."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if any("Thread._bootstrap" in f for f in frames):  # the metrics server's thread, idle
            continue
        samples += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            if "mpiop/" in frame and "(mpiop/cli.py" not in frame:
                total[frame] += int(count)
    if not samples:
        return []
    lines = [f"    {n * 100 / samples:5.1f}% self  {f}" for f, n in own.most_common(top)]
    lines += [f"    {n * 100 / samples:5.1f}% total {f}" for f, n in total.most_common(top)]
    return lines
