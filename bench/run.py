"""The benchmark: floor, burst, big jobs, then 1,000 settled jobs for restart, memory and status latency.

Order and why:

1. floor   J jobs x (Secret, ConfigMap, Service, W+1 Pods, one status write) through a bare async client at
           the operator's concurrency, before any operator runs: the apiserver's own limit on this machine.
           The namespace is then deleted (and waited for) so the operator starts on a clean cluster.
2. burst   `mpiop run` (defaults) is started; J jobs x W workers are submitted at once. Timed: every pod
           exists (burst_s, compared with floor_s), every job Running, every job Succeeded (the bench
           marks each launcher Succeeded as soon as its job is Running). API requests per job are read off
           the operator's own request counter.
3. big     one job with 64 workers, then one with 256: create to launcher pod created.
   qps50   the burst again (fresh namespace) with `--kube-api-qps=50 --kube-api-burst=100`, client-go's
           classic client-side limit (and mpiop's default until it was turned off): what such a limiter
           costs (burst_qps50_s, burst_qps50_over_floor).
4. scale   the operator is stopped; 1,000 jobs (default 9 workers: 10,000 pods) are created with the same
           bare client and mpiop's own object builders, and KWOK runs their pods; a fresh operator adopts
           and settles them (status, hostfile). Then:
   restart   the operator is restarted: seconds from exec to caches synced, and the writes it makes
             while it reconciles every job once (a settled job needs none).
   memory    the restarted operator's VmRSS, with every pod in its caches.
   latency   launchers of sampled jobs are marked Succeeded one at a time (every `--latency-interval`);
             time from sending the pod status write to the MPIJob status showing Succeeded.

Everything runs on a SimulatedCluster (mpiop/devcluster/simulated.py) that is torn down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    OperatorProcess,
    Tracker,
    bench_job,
    count_owned_pods,
    create_ignoring_exists,
    delete_namespace,
    finish_pod,
    first_status,
    fresh_namespace,
    launcher_of,
    owned_objects,
    percentile,
    profile_summary,
)
from mpiop.api.install import install_crd
from mpiop.devcluster.simulated import SimulatedCluster
from mpiop.kube.client import MPIJOBS, NAMESPACES, KubeClient

JSON = dict[str, Any]
FLOOR_MANAGER = "bench.mpiop.dev/floor"  # a foreign managedBy: no mpiop ever acts on floor jobs
PHASES = ("floor", "burst", "big", "qps50", "scale")
QPS50_ARGS = ["--kube-api-qps=50", "--kube-api-burst=100"]


@dataclass
class Options:
    jobs: int = 200
    workers: int = 8
    concurrency: int = 32
    reconcile_workers: int = 8
    big: tuple[int, ...] = (64, 256)
    scale_jobs: int = 1000
    scale_workers: int = 9
    latency_samples: int = 120
    latency_interval: float = 0.5
    pods_per_node: int = 110
    nodes: int = 0
    operator_args: list[str] = field(default_factory=list)
    phases: tuple[str, ...] = PHASES
    keep_logs: Path | None = None
    profile: Path | None = None
    timeout: float = 900.0


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, key: str, value: Any, label: str, target: str = "") -> None:
        self.figures[key] = value
        shown = str(value)
        if isinstance(value, float):
            shown = f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        self.rows.append((label, shown, target))
        print(f"  {label:<58} {shown:>12}  {target}", file=sys.stderr, flush=True)

    def table(self) -> str:
        width = max(len(r[0]) for r in self.rows)
        lines = [f"{'figure':<{width}}  {'value':>12}  target", "-" * (width + 30)]
        lines += [f"{label:<{width}}  {value:>12}  {target}" for label, value, target in self.rows]
        return "\n".join(lines)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def gather_limited(limit: int, jobs: list[Callable[[], Any]]) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Any]) -> Any:
        async with semaphore:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


# -- floor and fast creation ------------------------------------------------------------------------------
async def create_jobs_directly(kube: KubeClient, namespace: str, manifests: list[JSON], concurrency: int,
                              reconcile_workers: int, status: bool = True) -> None:
    """What mpiop does for new jobs, with no operator in between: status, then every object, per job."""
    semaphore = asyncio.Semaphore(concurrency)
    queue: asyncio.Queue[JSON | None] = asyncio.Queue()

    async def submit(manifest: JSON) -> None:
        async with semaphore:
            queue.put_nowait(await kube.create(MPIJOBS, namespace, manifest))

    async def one(obj: JSON) -> None:
        async with semaphore:
            await create_ignoring_exists(kube, obj)

    async def worker() -> None:
        while (job := await queue.get()) is not None:
            if status:
                async with semaphore:
                    await kube.patch(MPIJOBS, namespace, job["metadata"]["name"],
                                     {"status": first_status(job)}, subresource="status")
            await asyncio.gather(*(one(o) for o in owned_objects(job)))

    workers = [asyncio.create_task(worker()) for _ in range(reconcile_workers)]
    await asyncio.gather(*(submit(m) for m in manifests))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)


async def floor(kube: KubeClient, opts: Options, report: Report) -> None:
    namespace = "bench-floor"
    await fresh_namespace(kube, namespace)
    manifests = [bench_job(f"floor-{i}", opts.workers, managed_by=FLOOR_MANAGER) for i in range(opts.jobs)]
    log(f"floor: {opts.jobs} jobs x {opts.workers} workers through a bare client, {opts.concurrency} in flight")
    async with Tracker(kube, namespace) as tracker:
        started = time.monotonic()
        await create_jobs_directly(kube, namespace, manifests, opts.concurrency, opts.reconcile_workers)
        done = time.monotonic()
        pods = opts.jobs * (opts.workers + 1)
        seen = await tracker.wait_until(lambda: len(tracker.pod_added) >= pods, opts.timeout, "floor pods")
        running = await tracker.wait_until(lambda: len(tracker.pod_running) >= pods, opts.timeout,
                                           "floor pods running")
    report.add("floor_s", round(max(done, seen) - started, 3),
               f"floor: {opts.jobs}x{opts.workers} objects + status via bare client (s)")
    report.add("floor_pods_running_s", round(running - started, 3), "floor: ...and every pod Running (s)")
    gone = await delete_namespace(kube, namespace)
    log(f"floor namespace deleted in {gone:.1f}s")


# -- burst ------------------------------------------------------------------------------------------------
async def burst(kube: KubeClient, operator: OperatorProcess, opts: Options, report: Report, tag: str = "") -> None:
    """J x W submitted at once. `tag` names a what-if run (its own namespace, its own figure keys)."""
    namespace = f"bench-burst{tag.replace('_', '-')}"
    name = f"burst{tag}"
    label = "burst" if not tag else f"what-if {tag.strip('_')}"
    await fresh_namespace(kube, namespace)
    job_names = [f"burst-{i}" for i in range(opts.jobs)]
    pods = opts.jobs * (opts.workers + 1)
    finishing: list[asyncio.Task[None]] = []
    log(f"{label}: {opts.jobs} jobs x {opts.workers} workers submitted at once (operator flags {operator.args})")
    async with Tracker(kube, namespace) as tracker:
        def on_condition(job: str, condition: str, _at: float) -> None:
            if condition == "Running":
                finishing.append(asyncio.create_task(finish_pod(kube, namespace, launcher_of(job))))

        tracker.on_condition.append(on_condition)
        before, cpu_before = await operator.metrics(), operator.cpu_seconds()
        started = time.monotonic()
        await gather_limited(opts.concurrency, [
            functools.partial(kube.create, MPIJOBS, namespace, bench_job(n, opts.workers)) for n in job_names])
        submitted = time.monotonic()
        exist = await tracker.wait_until(lambda: len(tracker.pod_added) >= pods, opts.timeout, "burst pods")
        report.add(f"{name}_s", round(exist - started, 3),
                   f"{label}: {opts.jobs}x{opts.workers} every pod exists (s)", "<= 1.3 x floor" if not tag else "")
        running_pods = await tracker.wait_until(lambda: len(tracker.pod_running) >= pods, opts.timeout,
                                                "burst pods running")
        running = await tracker.wait_until(lambda: tracker.count_true("Running", job_names) == opts.jobs,
                                           opts.timeout, "burst jobs Running")
        succeeded = await tracker.wait_until(lambda: tracker.count_true("Succeeded", job_names) == opts.jobs,
                                             opts.timeout, "burst jobs Succeeded")
        await asyncio.gather(*finishing)
        after = await operator.settle()
    cpu = operator.cpu_seconds() - cpu_before
    spent = after - before
    report.add(f"{name}_submit_s", round(submitted - started, 3), f"{label}: all MPIJobs submitted (s)")
    report.add(f"{name}_pods_running_s", round(running_pods - started, 3), f"{label}: every pod Running (s)")
    report.add(f"{name}_running_s", round(running - started, 3), f"{label}: every job Running (s)")
    report.add(f"{name}_succeeded_s", round(succeeded - started, 3), f"{label}: every job Succeeded (s)")
    if not tag:
        report.add("api_requests_per_job", round(spent.total() / opts.jobs, 2), f"{label}: operator API requests/job")
        report.add("api_writes_per_job", round(spent.writes() / opts.jobs, 2), f"{label}: of which writes")
        report.figures["burst_requests_by_verb"] = dict(sorted(spent.by_verb().items()))
    report.add(f"{name}_operator_cpu_s", round(cpu, 2), f"{label}: operator CPU time (s)")


def has_pod(tracker: Tracker, name: str) -> Callable[[], bool]:
    return lambda: name in tracker.pod_added


def has_condition(tracker: Tracker, job: str, condition: str) -> Callable[[], bool]:
    return lambda: condition in tracker.job_true.get(job, {})


# -- big jobs ---------------------------------------------------------------------------------------------
async def big_jobs(kube: KubeClient, operator: OperatorProcess, opts: Options, report: Report) -> None:
    namespace = "bench-big"
    await fresh_namespace(kube, namespace)
    async with Tracker(kube, namespace) as tracker:
        for workers in opts.big:
            name = f"big-{workers}"
            log(f"big job: {workers} workers")
            started = time.monotonic()
            await kube.create(MPIJOBS, namespace, bench_job(name, workers))
            await tracker.wait_until(has_pod(tracker, launcher_of(name)), opts.timeout, f"{name} launcher")
            report.add(f"big_job_{workers}_s", round(tracker.pod_added[launcher_of(name)] - started, 3),
                       f"big job: {workers} workers, create to launcher pod created (s)",
                       "<= 1 s" if workers == 64 else "")
            # Let it run and finish, so its workers are gone before the next phase.
            await tracker.wait_until(has_condition(tracker, name, "Running"), opts.timeout, f"{name} Running")
            await finish_pod(kube, namespace, launcher_of(name))
            await tracker.wait_until(has_condition(tracker, name, "Succeeded"), opts.timeout,
                                     f"{name} Succeeded")
    await operator.settle()


# -- 1,000 settled jobs -----------------------------------------------------------------------------------
async def populate(kube: KubeClient, opts: Options, namespace: str) -> None:
    await fresh_namespace(kube, namespace)
    manifests = [bench_job(f"scale-{i}", opts.scale_workers) for i in range(opts.scale_jobs)]
    pods = opts.scale_jobs * (opts.scale_workers + 1)
    log(f"scale: creating {opts.scale_jobs} jobs, {pods} pods directly (no operator running)")
    async with Tracker(kube, namespace) as tracker:
        started = time.monotonic()
        await create_jobs_directly(kube, namespace, manifests, opts.concurrency, opts.reconcile_workers,
                                   status=False)
        await tracker.wait_until(lambda: len(tracker.pod_running) >= pods, opts.timeout, "scale pods running")
    log(f"scale: {pods} pods Running after {time.monotonic() - started:.1f}s")


async def scale(kube: KubeClient, cluster: SimulatedCluster, operator: OperatorProcess | None, opts: Options,
                report: Report, logs: Path) -> OperatorProcess:
    namespace = "bench-scale"
    if operator is not None:
        operator.stop()
    # Exactly `scale_jobs` jobs (and their pods) in the cluster for restart, memory and latency.
    earlier = [n for n in ("bench-burst", "bench-burst-qps50", "bench-big")
               if any(i["metadata"]["name"] == n for i in (await kube.list(NAMESPACES)).get("items", []))]
    if earlier:
        gone = await asyncio.gather(*(delete_namespace(kube, n) for n in earlier))
        log(f"scale: deleted {', '.join(earlier)} in {max(gone):.1f}s")
    await populate(kube, opts, namespace)
    total_jobs = len((await kube.list(MPIJOBS, None)).get("items", []))

    log("scale: an operator adopts and settles them")
    adopter = OperatorProcess(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                              profile_path(opts, "adopt"))
    adopter.start()
    await adopter.wait_synced()
    started = time.monotonic()
    async with Tracker(kube, namespace, pods=False) as tracker:
        job_names = [f"scale-{i}" for i in range(opts.scale_jobs)]
        await tracker.wait_until(lambda: tracker.count_true("Running", job_names) == opts.scale_jobs,
                                 opts.timeout, "scale jobs Running")
    adopted = await adopter.settle(quiet=3.0, min_reconciles=total_jobs)
    report.add("scale_adopt_s", round(time.monotonic() - started, 1),
               f"scale: {opts.scale_jobs} pre-made jobs adopted and settled (s)")
    report.add("scale_adopt_writes", adopted.writes(), "scale: writes while adopting (status, hostfile)")
    adopter.stop()

    log("restart: the operator restarted with every job settled")
    restarted = OperatorProcess(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                                profile_path(opts, "restart"))
    restarted.start()
    synced, inside = await restarted.wait_synced()
    settled = await restarted.settle(quiet=3.0, min_reconciles=total_jobs)
    pods = await count_owned_pods(kube)
    report.add("restart_sync_s", round(synced, 3), f"restart: exec to caches synced, {total_jobs} jobs (s)", "<= 5 s")
    report.add("restart_sync_in_manager_s", round(inside, 3), "restart: of which list+sync in the manager (s)")
    report.add("restart_writes", settled.writes(), "restart: writes while reconciling every job once", "0")
    report.add("restart_reconciles", int(settled.reconciles), "restart: reconciles done")
    report.add("rss_mb_10k_pods", round(restarted.rss_mb(), 1), f"memory: operator RSS, {pods} pods cached (MB)",
               "<= 150 MB")
    report.add("rss_peak_mb_10k_pods", round(restarted.peak_rss_mb(), 1), "memory: operator peak RSS (VmHWM, MB)")
    report.figures["pods_cached"] = pods
    report.figures["jobs_present"] = total_jobs
    if settled.writes():
        report.figures["restart_writes_by_verb"] = {k: v for k, v in settled.by_verb().items()
                                                    if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE")}
    await latency(kube, restarted, opts, report, namespace, total_jobs)
    return restarted


async def latency(kube: KubeClient, operator: OperatorProcess, opts: Options, report: Report, namespace: str,
                  total_jobs: int) -> None:
    log(f"latency: {opts.latency_samples} launchers finish, one every {opts.latency_interval}s")
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    async with Tracker(kube, namespace, pods=False) as tracker:
        def on_condition(job: str, condition: str, at: float) -> None:
            if condition == "Succeeded" and job in sent:
                seen.setdefault(job, at)

        tracker.on_condition.append(on_condition)
        candidates = [n for n, c in tracker.job_true.items() if "Running" in c and "Succeeded" not in c]
        chosen = random.Random(6).sample(sorted(candidates), min(opts.latency_samples, len(candidates)))
        writes: list[asyncio.Task[None]] = []
        for name in chosen:
            sent[name] = time.monotonic()
            writes.append(asyncio.create_task(finish_pod(kube, namespace, launcher_of(name))))
            await asyncio.sleep(opts.latency_interval)
        await asyncio.gather(*writes)
        await tracker.wait_until(lambda: len(seen) == len(chosen), opts.timeout, "sampled jobs Succeeded")
    samples = [(seen[n] - sent[n]) * 1000 for n in chosen]
    report.add("status_latency_p50_ms", round(percentile(samples, 50), 1),
               f"latency: pod phase -> MPIJob status, {total_jobs} jobs, p50 (ms)")
    report.add("status_latency_p99_ms", round(percentile(samples, 99), 1), "latency: p99 (ms)", "<= 200 ms")
    report.add("status_latency_max_ms", round(max(samples), 1), "latency: max (ms)")
    report.figures["latency_samples"] = len(samples)
    report.figures["latency_interval_s"] = opts.latency_interval
    await operator.settle()
    report.add("rss_mb_after_latency", round(operator.rss_mb(), 1), "memory: operator RSS after the latency run (MB)")


def profile_path(opts: Options, name: str) -> Path | None:
    if opts.profile is None:
        return None
    opts.profile.mkdir(parents=True, exist_ok=True)
    return opts.profile / f"operator-{name}.raw"


# -- the whole run ----------------------------------------------------------------------------------------
def nodes_needed(opts: Options) -> int:
    if opts.nodes:
        return opts.nodes
    peak = max(opts.jobs * (opts.workers + 1),
               2 * opts.jobs + sum(opts.big) + 2 + opts.scale_jobs * (opts.scale_workers + 1))
    return math.ceil(peak * 1.1 / opts.pods_per_node) + 1


async def bench(cluster: SimulatedCluster, opts: Options, report: Report, logs: Path) -> None:
    kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
    operator: OperatorProcess | None = None
    try:
        await install_crd(kube)
        if "floor" in opts.phases:
            await floor(kube, opts, report)
        if "burst" in opts.phases or "big" in opts.phases:
            operator = OperatorProcess(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                                       profile_path(opts, "burst"))
            operator.start()
            await operator.wait_synced()
            await operator.wait_metrics()
            if "burst" in opts.phases:
                await burst(kube, operator, opts, report)
            if "big" in opts.phases:
                await big_jobs(kube, operator, opts, report)
            report.add("rss_mb_after_burst", round(operator.rss_mb(), 1),
                       "memory: operator RSS after the burst and big jobs (MB)")
        if "qps50" in opts.phases:
            # The same burst behind a client-side rate limiter: what would 50 QPS cost?
            if operator is not None:
                operator.stop()
            operator = OperatorProcess(cluster.kubeconfig, logs / "operator.log",
                                       [*opts.operator_args, *QPS50_ARGS], profile_path(opts, "qps50"))
            operator.start()
            await operator.wait_synced()
            await operator.wait_metrics()
            await burst(kube, operator, opts, report, tag="_qps50")
        if "scale" in opts.phases:
            operator = await scale(kube, cluster, operator, opts, report, logs)
        if "floor_s" in report.figures and "burst_s" in report.figures:
            report.add("burst_over_floor", round(report.figures["burst_s"] / report.figures["floor_s"], 2),
                       "burst / floor (operator defaults)", "<= 1.3")
        if "floor_s" in report.figures and "burst_qps50_s" in report.figures:
            report.add("burst_qps50_over_floor",
                       round(report.figures["burst_qps50_s"] / report.figures["floor_s"], 2),
                       "what-if: burst / floor with --kube-api-qps=50 --kube-api-burst=100")
    finally:
        if operator is not None:
            operator.stop()
        await kube.close()


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="burst/floor: jobs submitted at once (200)")
    parser.add_argument("--workers", type=int, default=8, help="burst/floor: workers per job (8)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="requests in flight for the bench's submissions and the floor (32, like mpiop's "
                             "create concurrency)")
    parser.add_argument("--big", default="64,256", help="big-job worker counts (64,256)")
    parser.add_argument("--scale-jobs", type=int, default=1000, help="jobs present for restart/latency (1000)")
    parser.add_argument("--scale-workers", type=int, default=9, help="workers per scale job (9: 10 pods/job)")
    parser.add_argument("--latency-samples", type=int, default=120)
    parser.add_argument("--latency-interval", type=float, default=0.5,
                        help="seconds between sampled phase changes (0.5: 2 jobs finishing a second)")
    parser.add_argument("--pods-per-node", type=int, default=110)
    parser.add_argument("--nodes", type=int, default=0, help="fake nodes (default: enough for the peak)")
    parser.add_argument("--operator-arg", action="append", default=[],
                        help="extra `mpiop run` flag for a what-if run, e.g. --operator-arg=--kube-api-qps=200")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"subset of {','.join(PHASES)}")
    parser.add_argument("--quick", action="store_true", help="a small run: 20x4 burst, 16/32 big, 100 scale jobs")
    parser.add_argument("--keep-logs", type=Path, help="copy the component and operator logs here")
    parser.add_argument("--profile", type=Path,
                        help="record each operator process with py-spy into this directory (needs py-spy)")
    args = parser.parse_args(argv)
    opts = Options(jobs=args.jobs, workers=args.workers, concurrency=args.concurrency,
                   big=tuple(int(b) for b in args.big.split(",") if b), scale_jobs=args.scale_jobs,
                   scale_workers=args.scale_workers, latency_samples=args.latency_samples,
                   latency_interval=args.latency_interval, pods_per_node=args.pods_per_node, nodes=args.nodes,
                   operator_args=args.operator_arg, phases=tuple(p for p in args.phases.split(",") if p),
                   keep_logs=args.keep_logs, profile=args.profile)
    if args.quick:
        opts.jobs, opts.workers, opts.big, opts.scale_jobs, opts.latency_samples = 20, 4, (16, 32), 100, 40
    unknown = set(opts.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    report = Report()
    nodes = nodes_needed(opts)
    load_before = load()
    logs = Path(tempfile.mkdtemp(prefix="mpiop-bench-"))
    log(f"load average {load_before}; starting a simulated cluster with {nodes} fake nodes")
    cluster = SimulatedCluster(nodes=nodes, pods_per_node=opts.pods_per_node)
    started = time.monotonic()
    try:
        cluster.start()
        log(f"cluster up in {time.monotonic() - started:.1f}s")
        asyncio.run(bench(cluster, opts, report, logs))
    finally:
        if opts.keep_logs is not None:
            opts.keep_logs.mkdir(parents=True, exist_ok=True)
            workdir = cluster.control_plane.workdir
            if workdir is not None and (workdir / "logs").is_dir():
                shutil.copytree(workdir / "logs", opts.keep_logs / "cluster", dirs_exist_ok=True)
            shutil.copytree(logs, opts.keep_logs / "operator", dirs_exist_ok=True)
        cluster.stop()
        shutil.rmtree(logs, ignore_errors=True)
    report.figures["load_average_before"] = load_before
    report.figures["load_average_after"] = load()
    report.figures["cpus"] = os.cpu_count()
    report.figures["nodes"] = nodes
    report.figures["operator_args"] = opts.operator_args
    report.figures["bench_seconds"] = round(time.monotonic() - started, 1)
    if opts.profile is not None:
        for raw in sorted(opts.profile.glob("operator-*.raw")):
            print(f"py-spy profile {raw}:", *profile_summary(raw), sep="\n")
    print(report.table())
    print(f"load average before: {load_before}; after: {report.figures['load_average_after']} "
          f"({os.cpu_count()} CPUs); fake nodes: {nodes}; operator flags: {opts.operator_args or 'defaults'}")
    print(json.dumps(report.figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
