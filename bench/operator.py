"""The operator as the bench runs it: testkit's `mpiop run` process (through bench/operator_main.py, which
serves /metrics itself when an older mpiop does not), so its RSS and CPU are its own and every request it
makes is counted by its own request observer; and a py-spy profile of it, summed up."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from bench.cpu import cpu_seconds
from devcluster.controlplane import die_with_parent
from testkit.process import ROOT, OperatorProcess


class BenchOperator(OperatorProcess):
    """The operator process (without probes unless asked), its memory and CPU, and optionally sampled by py-spy."""

    def __init__(self, kubeconfig: str | Path, log: Path, args: Iterable[str] = (), profile: Path | None = None,
                 source: Path | None = None, health: bool = False) -> None:
        # `source`: another checkout's mpiop under this checkout's operator_main, run from a directory holding only
        # that (older checkouts' own operator_main took other arguments), so the first `mpiop` found is the source's.
        # In its own namespace as in a cluster (the Deployment's POD_NAMESPACE): so its status endpoint's CA is the one
        # kept in Secret default/mpiop-status-ca, and a restart finds every job's ConfigMap already carrying it.
        # `health`: with its probes (bench/startup.py times /readyz); without, one port and server fewer.
        env = {"POD_NAMESPACE": "default"}
        if source is None:
            super().__init__(kubeconfig, log, args, module=("bench.operator_main",), health=health, env=env)
        else:
            runner = Path(tempfile.mkdtemp(prefix="mpiop-bench-source-"))
            (runner / "operator_main.py").symlink_to(ROOT / "bench" / "operator_main.py")
            super().__init__(kubeconfig, log, args, module=("operator_main",), health=health,
                             env={**env, "PYTHONPATH": str(source)}, cwd=runner)
        self.profile = profile
        self.spy: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        super().start()
        if self.profile is not None:
            # py-spy (a dev dependency) samples the operator from outside, 100 times a second.
            spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
            if spy is None:
                raise RuntimeError("--profile needs py-spy: make venv (or .venv/bin/pip install py-spy)")
            self.spy = subprocess.Popen([spy, "record", "--pid", str(self.pid), "--rate", "100", "--format",
                                         "raw", "--nonblocking", "--output", str(self.profile)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)

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

    def stop(self, grace: float = 30.0) -> int | None:
        if self.spy is not None and self.spy.poll() is None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.spy.wait(timeout=30)
        return super().stop(grace)


# -- the profile, summed up ---------------------------------------------------------------------------------
# Where a sample's CPU goes: the innermost frame of the stack that one of these matches (checked in this order
# for each frame, from the innermost out). A trim called by the informer is trim; orjson under a watch is decode.
SPLIT = (
    ("encode", ("encode (mpiop/kube/codec.py", "model_dump", "dumps (")),
    ("decode", ("mpiop/kube/codec.py", "loads (")),
    ("trim", ("mpiop/kube/trim.py", "trim (", "trim_", "_slim_", "_read_state")),
    ("decide", ("mpiop/decide.py", "mpiop/policies/", "mpiop/status/", "mpiop/desired/", "mpiop/plan.py",
                "mpiop/podstate.py", "mpiop/api/")),
    ("cache", ("mpiop/kube/informer.py", "mpiop/controller/caches.py", "mpiop/kube/resourceversion.py",
               "mpiop/controller/deleted_pods.py")),
    ("reconcile", ("mpiop/controller/",)),  # the rest of the controller: carrying a plan out, the queue
    ("log", ("structlog", "/logging/")),
    ("metrics", ("prometheus_client",)),
    ("HTTP", ("aiohttp", "mpiop/kube/client.py", "yarl", "multidict", "ssl.py", "asyncio/selector_events",
              "asyncio/sslproto")),
)


# The innermost frame of an event loop waiting for I/O: asyncio's epoll wait, or uvloop's (inside its run, in C).
IDLE = ("Runner.run (", "EpollSelector.select (")


def category(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, marks in SPLIT:
            if any(mark in frame for mark in marks):
                return name
    return "other"


def profile_summary(raw: Path, top: int = 12) -> list[str]:
    """The CPU split into decode/encode/trim/decide/cache/reconcile/log/metrics/HTTP/other; the functions py-spy
    saw on CPU most (self time); and the mpiop frames most on the stack."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    split: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if any("Thread._bootstrap" in f for f in frames):  # the metrics server's thread, idle
            continue
        if frames[-1].startswith(IDLE):  # the event loop waiting for I/O: idle, not CPU
            continue
        samples += int(count)
        own[frames[-1]] += int(count)
        split[category(frames)] += int(count)
        for frame in set(frames):
            if "mpiop/" in frame and "(mpiop/cli.py" not in frame:
                total[frame] += int(count)
    if not samples:
        return []
    lines = ["    split: " + ", ".join(f"{name} {n * 100 / samples:.1f}%" for name, n in split.most_common())
             + f" ({samples} samples at 100/s)"]
    lines += [f"    {n * 100 / samples:5.1f}% self  {f}" for f, n in own.most_common(top)]
    lines += [f"    {n * 100 / samples:5.1f}% total {f}" for f, n in total.most_common(top)]
    return lines
