"""What a bench run is asked to do (Options) and what it found (Report), and its log lines."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLOOR_MANAGER = "bench.mpiop.dev/floor"  # a foreign managedBy: no mpiop ever acts on floor jobs
PHASES = ("floor", "lifecycle", "burst", "big", "sustained", "qps50", "scale")
QPS50_ARGS = ["--kube-api-qps=50", "--kube-api-burst=100"]


@dataclass
class Options:
    jobs: int = 200
    workers: int = 8
    concurrency: int = 32
    reconcile_workers: int = 32  # mpiop run --workers default
    big: tuple[int, ...] = (64, 256)
    scale_jobs: int = 1000
    scale_workers: int = 9
    latency_samples: int = 120
    latency_interval: float = 0.5
    pods_per_node: int = 110
    nodes: int = 0
    operator_args: list[str] = field(default_factory=list)
    # The burst's operator, run after run in turn: None is this checkout's, a path another checkout's mpiop.
    operator_sources: tuple[Path | None, ...] = (None,)
    apiserver_flags: list[str] = field(default_factory=list)  # extra kube-apiserver flags (--apiserver-flag)
    phases: tuple[str, ...] = PHASES
    sustained_rates: tuple[float, ...] = (5.0,)
    sustained_seconds: float = 300.0
    sustained_run_seconds: float = 5.0
    sustained_ttl: int = 20
    sustained_report: float = 10.0
    keep_logs: Path | None = None
    profile: Path | None = None
    timeout: float = 900.0
    repeat: int = 1
    quiet_load: float = 0.0  # 0: half the CPUs
    quiet_wait: float = 0.0
    # The burst's jobs' cleanPodPolicy (None: the default, Running). "None" keeps finished jobs' pods: what the
    # cleanup of the first finished jobs costs the ones still starting.
    clean_pod_policy: str | None = None


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # key, label, shown, target

    def add(self, key: str, value: Any, label: str, target: str = "", *, shown: str | None = None,
            echo: bool = True) -> None:
        self.figures[key] = value
        if shown is None:
            shown = str(value)
            if isinstance(value, float):
                shown = f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        self.rows.append((key, label, shown, target))
        if echo:
            print(f"  {label:<58} {shown:>12}  {target}", file=sys.stderr, flush=True)

    def table(self) -> str:
        width = max(len(r[1]) for r in self.rows)
        lines = [f"{'figure':<{width}}  {'value':>12}  target", "-" * (width + 30)]
        lines += [f"{label:<{width}}  {value:>12}  {target}" for _, label, value, target in self.rows]
        return "\n".join(lines)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def profile_path(opts: Options, name: str) -> Path | None:
    if opts.profile is None:
        return None
    opts.profile.mkdir(parents=True, exist_ok=True)
    return opts.profile / f"operator-{name}.raw"


# -- the whole run ----------------------------------------------------------------------------------------


def run_and_print(run: Callable[[argparse.Namespace, Path], Coroutine[Any, Any, dict[str, object]]],
                  args: argparse.Namespace, prefix: str) -> None:
    """Run a standalone bench (`args.keep_logs`: its logs' directory, else a temporary one), then print its
    figures one per line on stderr and as one JSON line on stdout."""
    if args.keep_logs is not None:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        results = asyncio.run(run(args, args.keep_logs))
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            results = asyncio.run(run(args, Path(tmp)))
    for key, value in results.items():
        print(f"  {key:<40} {value}", file=sys.stderr)
    print(json.dumps(results))
