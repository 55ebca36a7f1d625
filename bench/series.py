"""Floor and burst, repeated, with a quiet check: a figure is never taken from a loaded machine unawares.

Before the first repetition a few MPIJob writes warm the apiserver up, untimed (warm_up). Before each
repetition the 1-minute load average is compared with `--quiet-load` (default: half the CPUs);
with `--quiet-wait S` the bench waits up to S seconds for it to come down. Every repetition records its load
before and after and whether it started quiet. Each repetition is the same: the previous burst's namespace
is deleted, the floor runs with no operator, then a fresh `mpiop run` takes the burst. The summary gives the
median of each figure with its min and max (`<figure>_min`, `<figure>_max`, `<figure>_runs` in the JSON).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.baseline import THIS_CHECKOUT
from bench.harness import bench_job, delete_namespace, first_status, fresh_namespace
from bench.lifecycle import lifecycle_floor
from bench.operator import BenchOperator
from bench.phases import burst, floor
from bench.report import FLOOR_MANAGER, Options, Report, load, log, profile_path
from devcluster.simulated import SimulatedCluster
from mpiop.kube.client import MPIJOBS, NAMESPACES, KubeClient

WARM_UP_NAMESPACE = "bench-warm-up"

# The one burst target is against the lifecycle floor, which makes the same writes as mpiop; the floor makes
# fewer (no Running or Succeeded status, Events, discover_hosts.sh or deletion), so the ratios to it are shown
# without a target.
SERIES = {
    "floor_s": ("floor: every pod exists (s)", ""),
    "burst_s": ("burst: every pod exists (s)", ""),
    "burst_running_s": ("burst: every job Running (s)", ""),
    "burst_succeeded_s": ("burst: every job Succeeded (s)", ""),
    "burst_over_floor": ("burst / floor: every pod exists", ""),
    "burst_running_over_floor": ("burst every job Running / floor every pod Running", ""),
    "lifecycle_s": ("lifecycle floor: every pod exists (s)", ""),
    "lifecycle_running_s": ("lifecycle floor: every job Running (s)", ""),
    "lifecycle_over_floor": ("lifecycle floor / floor: every pod exists", ""),
    "lifecycle_running_over_floor": ("lifecycle floor every job Running / floor every pod Running", ""),
    "burst_running_over_lifecycle": ("burst every job Running / lifecycle floor every job Running", "<= 1.05"),
    # W + 12: the pods, Secret, ConfigMap, Service, 3 status writes, 3 Events, discover_hosts.sh, one deletion.
    "api_requests_per_job": ("burst: operator API requests per job", ""),
}


# Kept per run, and shown per operator source when runs take other checkouts' operators in turn.
BY_SOURCE = ("operator_source", "burst_s", "burst_running_s", "burst_operator_cpu_s", "burst_pod_events",
             "burst_cpu_s_per_1k_pod_events", "burst_cpu_ms_per_reconcile", "reconciles_per_job")


def by_source(runs: list[dict[str, Any]]) -> list[str]:
    """Lines of a table: each operator source's runs, their burst figures side by side (in run order)."""
    lines = [f"{'operator source':<36} {'load':>5} {'pods s':>7} {'Running s':>9} {'CPU s':>6} {'pod ev':>7} "
             f"{'CPU-s/1k ev':>11} {'CPU-ms/rec':>10}"]
    for run in sorted(runs, key=lambda r: str(r.get("operator_source"))):
        lines.append(f"{str(run.get('operator_source'))[-36:]:<36} {run['load_before'].split()[0]:>5} "
                     f"{run.get('burst_s', '-'):>7} {run.get('burst_running_s', '-'):>9} "
                     f"{run.get('burst_operator_cpu_s', '-'):>6} {run.get('burst_pod_events', '-'):>7} "
                     f"{run.get('burst_cpu_s_per_1k_pod_events', '-'):>11} "
                     f"{run.get('burst_cpu_ms_per_reconcile', '-'):>10}")
    return lines


def one_minute_load() -> float:
    return os.getloadavg()[0]


async def quiet_check(opts: Options) -> bool:
    """Wait (up to --quiet-wait) for the 1-minute load to be at most --quiet-load; whether it was."""
    limit = opts.quiet_load if opts.quiet_load > 0 else (os.cpu_count() or 1) / 2
    deadline = time.monotonic() + opts.quiet_wait
    for _ in range(int(opts.quiet_wait // 5) + 1):
        if one_minute_load() <= limit or time.monotonic() >= deadline:
            break
        await asyncio.sleep(5)
    quiet = one_minute_load() <= limit
    if not quiet:
        log(f"NOT QUIET: 1-minute load average {one_minute_load():.2f} > {limit:.2f}; figures taken under load")
    return quiet


async def warm_up(kube: KubeClient, jobs: int) -> float:
    """A fresh cluster's first MPIJob writes take the apiserver ~2 s (it builds the CRD's handler, schema
    converters and CEL programs): a few jobs are created and given a status first, untimed, so the first run's
    floor does not carry a cost the later runs' do not. Seconds taken, their namespace's deletion included."""
    started = time.monotonic()
    await fresh_namespace(kube, WARM_UP_NAMESPACE)
    manifests = [bench_job(f"warm-up-{i}", 1, managed_by=FLOOR_MANAGER) for i in range(jobs)]
    created = await asyncio.gather(*(kube.create(MPIJOBS, WARM_UP_NAMESPACE, m) for m in manifests))
    await asyncio.gather(*(kube.patch(MPIJOBS, WARM_UP_NAMESPACE, j["metadata"]["name"], {"status": first_status(j)},
                                      subresource="status") for j in created))
    await delete_namespace(kube, WARM_UP_NAMESPACE)
    return time.monotonic() - started


async def burst_namespaces(kube: KubeClient) -> list[str]:
    listed = (await kube.list(NAMESPACES)).get("items", [])
    return [n["metadata"]["name"] for n in listed if n["metadata"]["name"].startswith("bench-burst")]


async def floor_and_burst(kube: KubeClient, cluster: SimulatedCluster, opts: Options, report: Report,
                          logs: Path) -> BenchOperator | None:
    """Run the repetitions; leave the last one's operator running (for the big jobs), or None."""
    runs: list[dict[str, Any]] = []
    last = Report()
    operator: BenchOperator | None = None
    log(f"apiserver warmed up for MPIJob writes in {await warm_up(kube, opts.concurrency):.1f}s (untimed)")
    for run in range(opts.repeat):
        if run:
            if operator is not None:
                operator.stop()
                operator = None
            gone = await asyncio.gather(*(delete_namespace(kube, n) for n in await burst_namespaces(kube)))
            log(f"run {run + 1}/{opts.repeat}: previous burst deleted in {max(gone, default=0):.1f}s")
        quiet = await quiet_check(opts)
        figures: dict[str, Any] = {"load_before": load(), "quiet": quiet}
        scratch = Report()
        pids = {**cluster.pids_by_name(), "bench": os.getpid()}
        if "floor" in opts.phases:
            await floor(kube, opts, scratch, pids)
        if "lifecycle" in opts.phases:
            await lifecycle_floor(kube, opts, scratch, pids)
        if "burst" in opts.phases or ("big" in opts.phases and run == opts.repeat - 1):
            source = opts.operator_sources[run % len(opts.operator_sources)]
            figures["operator_source"] = str(source or THIS_CHECKOUT)
            operator = BenchOperator(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                                     profile_path(opts, f"burst-{run}"), source)
            operator.start()
            await operator.wait_synced()
            await operator.wait_metrics()
        if "burst" in opts.phases and operator is not None:
            await burst(kube, operator, opts, scratch, pids=pids)
        figures.update(scratch.figures, load_after=load())
        if "floor_s" in figures and "burst_s" in figures:
            figures["burst_over_floor"] = round(figures["burst_s"] / figures["floor_s"], 3)
            # Jobs are Running once their pods are: the floor for that is the bare client's pods all Running.
            figures["burst_running_over_floor"] = round(figures["burst_running_s"] / figures["floor_pods_running_s"], 3)
        if "floor_s" in figures and "lifecycle_running_s" in figures:
            figures["lifecycle_over_floor"] = round(figures["lifecycle_s"] / figures["floor_s"], 3)
            figures["lifecycle_running_over_floor"] = round(
                figures["lifecycle_running_s"] / figures["floor_pods_running_s"], 3)
        if "burst_s" in figures and "lifecycle_running_s" in figures:
            figures["burst_running_over_lifecycle"] = round(
                figures["burst_running_s"] / figures["lifecycle_running_s"], 3)
        log(f"run {run + 1}/{opts.repeat}: load average {figures['load_before']} -> {figures['load_after']}"
            f"{'' if quiet else ' (NOT QUIET)'}")
        for window in ("floor_cpu_s", "lifecycle_cpu_s", "burst_cpu_s"):
            if window in figures:
                spent = " ".join(f"{k}={v}" for k, v in figures[window].items())
                log(f"run {run + 1}/{opts.repeat}: {window} {spent}")
        runs.append(figures)
        last = scratch
    summarize(report, runs, last)
    return operator


def summarize(report: Report, runs: list[dict[str, Any]], last: Report) -> None:
    """Median of each figure over the runs, with min and max; the other figures of the last run as they were."""
    for key, label, shown, target in last.rows:
        if key not in SERIES:
            report.add(key, last.figures[key], label, target, shown=shown, echo=False)
    for key, value in last.figures.items():
        if key not in SERIES:
            report.figures.setdefault(key, value)
    kept = ("load_before", "load_after", "quiet", "floor_cpu_s", "lifecycle_cpu_s", "burst_cpu_s", *BY_SOURCE)
    report.figures["runs"] = [{k: r[k] for k in kept if k in r} for r in runs]
    report.figures["all_runs_quiet"] = all(r["quiet"] for r in runs)
    for key, (label, target) in SERIES.items():
        values = [r[key] for r in runs if key in r]
        if not values:
            continue
        low, middle, high = min(values), statistics.median(values), max(values)
        report.add(key, round(middle, 3), f"{label}, median of {len(values)}", target,
                   shown=f"{middle:.2f} [{low:.2f}-{high:.2f}]" if len(values) > 1 else None)
        report.figures[f"{key}_min"], report.figures[f"{key}_max"] = low, high
        report.figures[f"{key}_runs"] = values
