"""`mpiop run` as a child process, as the integration tests and the bench run it: its own log (JSON lines),
/metrics and probe ports, and SIGKILL if the parent dies, so an interrupted run leaks no operator."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from devcluster.controlplane import die_with_parent, free_port
from testkit.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]


def terminate(process: subprocess.Popen[bytes] | None, grace: float) -> int | None:
    """SIGTERM, SIGKILL after `grace` seconds; the exit code (None if it was never started)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    return process.returncode


class OperatorProcess:
    """`python -m <module> --kubeconfig K --log-format=json --metrics-addr ... --health-addr ... --status-addr ...
    [args]`.

    `module` is `mpiop run` unless a caller wraps it (the bench's `bench.operator_main`); `health_port` 0
    turns the probes off; `env` and `cwd` can run the operator from another checkout (e2e's
    MPIOP_E2E_OPERATOR_SOURCE); `status_host` is where the status endpoint listens and the pods reach it.
    The log is appended to, and read from where this process started writing.
    """

    def __init__(self, kubeconfig: str | Path, log_path: Path, args: Iterable[str] = (), *,
                 field_manager: str = "mpiop", module: tuple[str, ...] = ("mpiop", "run"),
                 health: bool = True, env: Mapping[str, str] | None = None, cwd: Path = ROOT,
                 status_host: str = "127.0.0.1") -> None:
        self.kubeconfig = str(kubeconfig)
        self.log_path = log_path
        self.args = list(args)
        self.field_manager = field_manager
        self.module = module
        self.metrics_port = free_port()
        self.health_port = free_port() if health else 0
        self.status_port = free_port()  # the status endpoint's (HTTPS), on `status_host` (pods on a node: its bridge)
        self.status_host = status_host
        self.env = dict(env or {})
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.spawned_wall = 0.0
        self._log_offset = 0

    @classmethod
    def in_namespace(cls, kubeconfig: str | Path, namespace: str, field_manager: str, logs: Path,
                     *args: str, env: Mapping[str, str] | None = None) -> OperatorProcess:
        """Started on one namespace with its own field manager, logging to `logs/<field_manager>.log`."""
        op = cls(kubeconfig, logs / f"{field_manager}.log",
                 [f"--namespace={namespace}", "--workers=4", f"--field-manager={field_manager}", *args],
                 field_manager=field_manager, env=env)
        op.start()
        return op

    @property
    def status_url(self) -> str:
        return f"https://{self.status_host}:{self.status_port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        health = f"127.0.0.1:{self.health_port}" if self.health_port else "0"
        argv = [sys.executable, "-m", *self.module, f"--kubeconfig={self.kubeconfig}", "--log-format=json",
                f"--metrics-addr=127.0.0.1:{self.metrics_port}", f"--health-addr={health}",
                f"--status-addr={self.status_host}:{self.status_port}", f"--status-url={self.status_url}", *self.args]
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.spawned_wall = time.time()
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=die_with_parent, cwd=self.cwd,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_lines(self) -> list[str]:
        """What this process logged (not earlier processes' lines in the same file)."""
        with self.log_path.open("rb") as handle:
            handle.seek(self._log_offset)
            return handle.read().decode(errors="replace").splitlines()

    def json_log(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log_lines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines

    async def wait_synced(self, timeout: float = 120.0) -> tuple[float, float]:
        """(seconds from spawn to `caches synced` by its log timestamp, the manager's own sync seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"operator exited with {self.process.returncode}; see {self.log_path}")
            for line in self.json_log():
                if line.get("event") == "caches synced":
                    stamp = dt.datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00"))
                    return stamp.timestamp() - self.spawned_wall, float(line.get("seconds", 0.0))
            await asyncio.sleep(0.02)  # poll interval of the log: the sync's own timestamp is what is measured
        raise TimeoutError(f"operator caches not synced after {timeout}s; see {self.log_path}")

    async def http(self, port: int, path: str) -> tuple[int, str]:
        """(status, body) of a GET on 127.0.0.1:`port`; (0, "") when nothing answers."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
                    session.get(f"http://127.0.0.1:{port}{path}") as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return 0, ""

    async def metrics(self) -> Metrics:
        status, text = await self.http(self.metrics_port, "/metrics")
        if status != 200:
            raise ConnectionError(f"/metrics of {self.field_manager} answered {status or 'nothing'}")
        return Metrics.parse(text)

    async def wait_metrics(self, timeout: float = 60.0) -> Metrics:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await self.metrics()
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)  # poll interval: /metrics answers once the process has started

    async def ready(self) -> bool:
        return (await self.http(self.health_port, "/readyz"))[0] == 200

    async def is_leader(self) -> bool:
        status, text = await self.http(self.metrics_port, "/metrics")
        return status == 200 and Metrics.parse(text).value("mpi_operator_is_leader") == 1

    async def settle(self, quiet: float = 2.0, timeout: float = 600.0, min_reconciles: float = 0,
                     every: float = 1.0) -> Metrics:
        """Wait until the operator makes no request for `quiet` seconds, its queue is empty and it reconciled
        at least `min_reconciles` times. Scraped every `every` seconds: /metrics computes per-job gauges at
        scrape time, so scraping much more often than Prometheus would (15-30 s) adds work to the operator."""
        deadline = time.monotonic() + timeout
        last = await self.metrics()
        since = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(every)  # scrape interval; quiet is `quiet` s without a request, by these scrapes
            now = await self.metrics()
            if now.total() != last.total() or now.reconciles < min_reconciles or now.queue_depth > 0:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return now
        raise TimeoutError(f"operator not quiet after {timeout}s; see {self.log_path}")

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM, SIGKILL after `grace` seconds; the exit code (None if it was never started)."""
        return terminate(self.process, grace)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
