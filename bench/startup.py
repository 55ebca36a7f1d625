"""`python -m bench.startup`: how soon a restarted (or newly started) mpiop is ready, and working.

On a simulated cluster (devcluster/simulated.py) `--jobs` jobs of `--workers` workers are taken to Running by one
operator, which is then stopped. `mpiop run` (as bench/operator.py runs it, with its probes on) is then started
`--starts` times on those settled jobs, each stopped (SIGTERM) before the next, and timed from its exec (the bench's
spawn of the process):

* `import`: `python -c "import mpiop.process"` alone, in a fresh interpreter, best of `--starts`, in wall-clock and
  in CPU seconds (`import_cpu_s`: on a busy machine the one to compare);
* `ready`: its /readyz first answers 200 (polled every 20 ms): what a kubelet's readiness probe sees;
* `synced`: the timestamp of its `caches synced` log line (what `bench`'s restart phase times at 1,000 jobs), and
  `synced_cpu_s`, the CPU seconds the process had spent by then (the line says; an older checkout's, read off
  /proc when the bench sees the line: later, so more); on a busy machine the figure to compare;
* `first_reconcile`: the timestamp of its `first reconcile done` line (the end of its first reconcile; a settled
  job's pass writes nothing), or of an older checkout's first `reconciled` line (it runs at `--log-level=debug`);
  `first_reconcile_cpu_s` as for synced.

`--operator-source DIR` (repeatable) times another checkout's mpiop the same way (a git worktree of an older
commit), the starts alternating between the checkouts. Each figure is the median [min-max] of the starts; one
JSON line ends the run. Nothing here asserts a time: the regression guard of the imports is a unit test
(tests/unit/test_startup_imports.py), the figures are for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import bench_job, fresh_namespace
from bench.operator import BenchOperator
from bench.outage import wait_all_running
from bench.report import load, log, run_and_print
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop.kube.client import MPIJOBS, KubeClient
from testkit.process import ROOT

NAMESPACE = "bench-startup"
POLL = 0.02
FIGURES = ("ready_s", "synced_s", "first_reconcile_s")
SHOWN = (*FIGURES, "synced_cpu_s", "first_reconcile_cpu_s")


def import_seconds(source: Path | None, tries: int) -> tuple[float, float]:
    """`python -c "import mpiop.process"` in a fresh interpreter, the best of `tries`: (wall-clock seconds, CPU
    seconds, user + system). The CPU is the figure to compare on a busy machine: it hardly moves with the load."""
    env = {**os.environ, **({"PYTHONPATH": str(source)} if source is not None else {})}
    cwd = tempfile.gettempdir() if source is not None else str(ROOT)
    wall = cpu = float("inf")
    for _ in range(tries):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mpiop.process"], check=True, env=env, cwd=cwd)
        wall = min(wall, time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def _stamp(line: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()


# The log lines that end each figure: the first reconcile's own info line, or (older checkouts, at debug) its
# `reconciled` line, logged just before it.
ENDS = {"caches synced": "synced_s", "first reconcile done": "first_reconcile_s", "reconciled": "first_reconcile_s"}


async def until_working(operator: BenchOperator, wanted: tuple[str, ...] = FIGURES,
                        timeout: float = 300.0) -> dict[str, float]:
    """Seconds from the started `operator`'s exec to ready, to caches synced and to its first reconcile's end (the
    `wanted` ones of FIGURES)."""
    figures: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while not set(wanted) <= set(figures):
        if not operator.running():
            raise RuntimeError(f"the operator exited; see {operator.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sorted(figures)} after {timeout}s; see {operator.log_path}")
        if "ready_s" in wanted and "ready_s" not in figures and await operator.ready():
            figures["ready_s"] = time.time() - operator.spawned_wall
        for line in operator.json_log():
            key = ENDS.get(str(line.get("event")))
            # `first reconcile done` wins over the `reconciled` line just before it: it says its CPU seconds.
            if key in wanted and (key not in figures or line["event"] == "first reconcile done"):
                figures[key] = _stamp(line) - operator.spawned_wall
                # The operator's own CPU seconds by then; an older checkout's line has none: read now instead.
                figures[f"{key[:-2]}_cpu_s"] = float(line.get("process_cpu_s") or operator.cpu_seconds())
        await asyncio.sleep(POLL)  # the probe's poll: ready_s is late by up to this much, the log's stamps are not
    return figures


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    sources: list[Path | None] = [None, *args.operator_source]
    nodes = max(4, args.jobs * (args.workers + 1) // 100 + 2)
    results: dict[str, object] = {"jobs": args.jobs, "workers": args.workers, "starts": args.starts,
                                  "load_start": load()}
    for source in sources:
        wall, cpu = import_seconds(source, args.starts)
        results[f"import_s{_suffix(source)}"], results[f"import_cpu_s{_suffix(source)}"] = round(wall, 3), round(cpu, 3)
    with SimulatedCluster(nodes=nodes) as cluster:
        kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
        try:
            await install_crd(kube)
            await fresh_namespace(kube, NAMESPACE)
            settler = BenchOperator(cluster.kubeconfig, workdir / "operator.log")
            settler.start()
            try:
                await settler.wait_synced()
                await asyncio.gather(*(kube.create(MPIJOBS, NAMESPACE, bench_job(f"job-{i}", args.workers))
                                       for i in range(args.jobs)))
                took = await wait_all_running(kube, args.jobs, 600.0, NAMESPACE)
                await settler.wait_metrics()
                await settler.settle(quiet=2.0)
                log(f"{args.jobs} jobs x {args.workers} workers Running in {took:.1f}s, settled")
            finally:
                settler.stop()
            starts: dict[Path | None, list[dict[str, float]]] = {source: [] for source in sources}
            for index in range(args.starts):
                for source in sources:
                    operator = BenchOperator(cluster.kubeconfig, workdir / "operator.log", ["--log-level=debug"],
                                             source=source, health=True)
                    operator.start()
                    try:
                        figures = await until_working(operator)
                    finally:
                        operator.stop()
                    starts[source].append(figures)
                    shown = " ".join(f"{k} {v:.3f}" for k, v in figures.items())
                    log(f"start {index + 1}/{args.starts} {source or 'this checkout'}: {shown}")
            for source, figures_list in starts.items():
                for key in SHOWN:
                    values = [f[key] for f in figures_list if key in f]
                    if not values:
                        continue
                    results[f"{key}{_suffix(source)}"] = round(statistics.median(values), 3)
                    results[f"{key}{_suffix(source)}_runs"] = [round(v, 3) for v in values]
                    log(f"{source or 'this checkout'}: {key} {summary(values)}")
        finally:
            await kube.close()
    results["load_end"] = load()
    return results


def _suffix(source: Path | None) -> str:
    return "" if source is None else f"_{source.name}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="settled jobs in the cluster at each start (20)")
    parser.add_argument("--workers", type=int, default=4, help="workers per job (4)")
    parser.add_argument("--starts", type=int, default=5, help="starts of each checkout's operator (5)")
    parser.add_argument("--operator-source", type=Path, action="append", default=[],
                        help="also time another checkout's mpiop (a git worktree), alternating with this one")
    parser.add_argument("--keep-logs", type=Path, default=None, help="keep the operator's log in this directory")
    args = parser.parse_args()
    run_and_print(run, args, "mpiop-startup-")


if __name__ == "__main__":
    main()
