"""The measured phases: floor, burst (and its what-ifs), big jobs, scale with restart, memory and latency."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter
from bench.harness import (
    Tracker,
    bench_job,
    count_owned_pods,
    create_ignoring_exists,
    delete_namespace,
    finish_pod,
    first_status,
    fresh_namespace,
    is_launcher,
    launcher_of,
    owned_objects,
    percentile,
)
from bench.operator import BenchOperator
from bench.report import FLOOR_MANAGER, Options, Report, log, profile_path
from bench.startup import FIGURES, until_working
from devcluster.simulated import SimulatedCluster
from mpiop.api.raw import JSON
from mpiop.kube.client import MPIJOBS, NAMESPACES, KubeClient


async def gather_limited(limit: int, jobs: list[Callable[[], Any]]) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Any]) -> Any:
        async with semaphore:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


# -- floor and fast creation ------------------------------------------------------------------------------
async def create_jobs_directly(kube: KubeClient, namespace: str, manifests: list[JSON], concurrency: int,
                              reconcile_workers: int, status: bool = True,
                              made: dict[str, tuple[JSON, list[JSON]]] | None = None,
                              build: Callable[[JSON], list[JSON]] = owned_objects) -> None:
    """What mpiop does for new jobs, with no operator in between: status, then every object, per job.

    `made`: filled with each job as its first status write answered and the objects made for it, by name,
    before they are created. `build`: what is made for a job (default: mpiop's objects at its defaults).
    """
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
                    job = await kube.patch(MPIJOBS, namespace, job["metadata"]["name"],
                                           {"status": first_status(job)}, subresource="status")
            objects = build(job)
            if made is not None:
                made[job["metadata"]["name"]] = (job, objects)
            # mpiop's order (Plan.creation_steps): the launcher only once its workers exist, which its lost-worker
            # rule relies on (a worker younger than the launcher replaced one it lost).
            launchers = [o for o in objects if is_launcher(o)]
            await asyncio.gather(*(one(o) for o in objects if not is_launcher(o)))
            await asyncio.gather(*(one(o) for o in launchers))

    workers = [asyncio.create_task(worker()) for _ in range(reconcile_workers)]
    await asyncio.gather(*(submit(m) for m in manifests))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)


async def floor(kube: KubeClient, opts: Options, report: Report, pids: dict[str, int] | None = None) -> None:
    """`pids`: processes whose CPU until every pod Running is reported (`floor_cpu_s`)."""
    namespace = "bench-floor"
    await fresh_namespace(kube, namespace)
    manifests = [bench_job(f"floor-{i}", opts.workers, managed_by=FLOOR_MANAGER) for i in range(opts.jobs)]
    log(f"floor: {opts.jobs} jobs x {opts.workers} workers through a bare client, {opts.concurrency} in flight")
    async with Tracker(kube, namespace) as tracker:
        meter = CpuMeter(pids or {})
        started = time.monotonic()
        await create_jobs_directly(kube, namespace, manifests, opts.concurrency, opts.reconcile_workers)
        done = time.monotonic()
        pods = opts.jobs * (opts.workers + 1)
        seen = await tracker.wait_until(lambda: len(tracker.pod_added) >= pods, opts.timeout, "floor pods")
        running = await tracker.wait_until(lambda: len(tracker.pod_running) >= pods, opts.timeout,
                                           "floor pods running")
        report.figures["floor_cpu_s"] = meter.stop()
    report.add("floor_s", round(max(done, seen) - started, 3),
               f"floor: {opts.jobs}x{opts.workers} objects + status via bare client (s)")
    report.add("floor_pods_running_s", round(running - started, 3), "floor: ...and every pod Running (s)")
    gone = await delete_namespace(kube, namespace)
    log(f"floor namespace deleted in {gone:.1f}s")


# -- burst ------------------------------------------------------------------------------------------------
async def burst(kube: KubeClient, operator: BenchOperator, opts: Options, report: Report, tag: str = "",
                pids: dict[str, int] | None = None) -> None:
    """J x W submitted at once. `tag` names a what-if run (its own namespace, its own figure keys).

    `pids`: processes whose CPU until every job Running is reported, with the operator's (`<name>_cpu_s`).
    """
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
        pod_events_before = tracker.pods.stats.events
        meter = CpuMeter({**(pids or {}), "operator": operator.pid})
        started = time.monotonic()
        await gather_limited(opts.concurrency, [
            functools.partial(kube.create, MPIJOBS, namespace,
                              bench_job(n, opts.workers, clean_pod_policy=opts.clean_pod_policy))
            for n in job_names])
        submitted = time.monotonic()
        exist = await tracker.wait_until(lambda: len(tracker.pod_added) >= pods, opts.timeout, "burst pods")
        report.add(f"{name}_s", round(exist - started, 3),
                   f"{label}: {opts.jobs}x{opts.workers} every pod exists (s)")
        running_pods = await tracker.wait_until(lambda: len(tracker.pod_running) >= pods, opts.timeout,
                                                "burst pods running")
        running = await tracker.wait_until(lambda: tracker.count_true("Running", job_names) == opts.jobs,
                                           opts.timeout, "burst jobs Running")
        report.figures[f"{name}_cpu_s"] = meter.stop()
        succeeded = await tracker.wait_until(lambda: tracker.count_true("Succeeded", job_names) == opts.jobs,
                                             opts.timeout, "burst jobs Succeeded")
        await asyncio.gather(*finishing)
        after = await operator.settle()
        pod_events = tracker.pods.stats.events - pod_events_before
    cpu = operator.cpu_seconds() - cpu_before
    spent = after - before
    report.add(f"{name}_submit_s", round(submitted - started, 3), f"{label}: all MPIJobs submitted (s)")
    report.add(f"{name}_pods_running_s", round(running_pods - started, 3), f"{label}: every pod Running (s)")
    report.add(f"{name}_running_s", round(running - started, 3), f"{label}: every job Running (s)")
    report.add(f"{name}_succeeded_s", round(succeeded - started, 3), f"{label}: every job Succeeded (s)")
    if not tag:
        report.add("api_requests_per_job", round(spent.total() / opts.jobs, 2), f"{label}: operator API requests/job")
        report.add("api_writes_per_job", round(spent.writes() / opts.jobs, 2), f"{label}: of which writes")
        report.add("reconciles_per_job", round(spent.reconciles / opts.jobs, 2), f"{label}: reconciles per job")
        report.figures["burst_requests_by_verb"] = dict(sorted(spent.by_verb().items()))
        # Streams the apiserver closed on the operator (e.g. a watcher too slow to keep up), each re-opened.
        report.figures["burst_watch_restarts"] = dict(sorted(spent.watch_restarts.items()))
        report.figures["api_requests_per_job_by_verb"] = {
            k: round(v / opts.jobs, 2) for k, v in sorted(spent.by_verb().items())}
    report.add(f"{name}_operator_cpu_s", round(cpu, 2), f"{label}: operator CPU time (s)")
    # Per unit of work, so a regression in the cost of each watch event or reconcile shows without a side-by-side:
    # the pod watch events are the bench's own watch of the namespace, the ones the operator's pod informer gets.
    report.add(f"{name}_pod_events", pod_events, f"{label}: pod watch events")
    if pod_events:
        report.add(f"{name}_cpu_s_per_1k_pod_events", round(cpu * 1000 / pod_events, 3),
                   f"{label}: operator CPU-s per 1,000 pod events")
    if spent.reconciles:
        report.add(f"{name}_cpu_ms_per_reconcile", round(cpu * 1000 / spent.reconciles, 2),
                   f"{label}: operator CPU-ms per reconcile (all its CPU / reconciles)")


def has_pod(tracker: Tracker, name: str) -> Callable[[], bool]:
    return lambda: name in tracker.pod_added


def has_condition(tracker: Tracker, job: str, condition: str) -> Callable[[], bool]:
    return lambda: condition in tracker.job_true.get(job, {})


# -- big jobs ---------------------------------------------------------------------------------------------
async def big_jobs(kube: KubeClient, operator: BenchOperator, opts: Options, report: Report) -> None:
    namespace = "bench-big"
    await fresh_namespace(kube, namespace)
    async with Tracker(kube, namespace) as tracker:
        # A fresh cluster's first MPIJob writes take the apiserver ~2 s (it builds the CRD's handler, schema
        # converters and CEL programs), and a fresh operator opens its connections: a 1-worker job first, untimed.
        for name, workers, timed in [("big-warm-up", 1, False), *((f"big-{w}", w, True) for w in opts.big)]:
            log(f"big job: {workers} workers" if timed else "big job: a 1-worker job first, untimed")
            started = time.monotonic()
            await kube.create(MPIJOBS, namespace, bench_job(name, workers))
            await tracker.wait_until(has_pod(tracker, launcher_of(name)), opts.timeout, f"{name} launcher")
            if timed:
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


async def scale(kube: KubeClient, cluster: SimulatedCluster, operator: BenchOperator | None, opts: Options,
                report: Report, logs: Path) -> BenchOperator:
    namespace = "bench-scale"
    if operator is not None:
        operator.stop()
    # Exactly `scale_jobs` jobs (and their pods) in the cluster for restart, memory and latency.
    earlier = [n for n in (i["metadata"]["name"] for i in (await kube.list(NAMESPACES)).get("items", []))
               if n.startswith("bench-burst") or n == "bench-big"]
    if earlier:
        gone = await asyncio.gather(*(delete_namespace(kube, n) for n in earlier))
        log(f"scale: deleted {', '.join(earlier)} in {max(gone):.1f}s")
    await populate(kube, opts, namespace)
    total_jobs = len((await kube.list(MPIJOBS, None)).get("items", []))

    log("scale: an operator adopts and settles them")
    adopter = BenchOperator(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
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

    pods = await count_owned_pods(kube)
    report.figures["pods_cached"] = pods
    report.figures["jobs_present"] = total_jobs
    # Each --operator-source restarted on the same settled jobs in turn (suffixed by its directory's name), then
    # this checkout's again for the latency run.
    for source in [*opts.operator_sources[1:], None]:
        restarted = await restart(cluster, opts, report, logs, total_jobs, pods, source)
        if source is not None:
            restarted.stop()
    await latency(kube, restarted, opts, report, namespace, total_jobs)
    return restarted


async def restart(cluster: SimulatedCluster, opts: Options, report: Report, logs: Path, total_jobs: int, pods: int,
                  source: Path | None) -> BenchOperator:
    """The operator (this checkout's, or `source`'s) restarted with every job settled: its sync, writes and RSS."""
    suffix = "" if source is None else f"_{source.name}"
    log(f"restart: the operator{f' of {source}' if source else ''} restarted with every job settled")
    restarted = BenchOperator(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                              profile_path(opts, f"restart{suffix}"), source=source, health=True)
    restarted.start()
    # An older checkout logs no `first reconcile done` at info: its first reconcile is not timed.
    started = await until_working(restarted, FIGURES if source is None else ("ready_s", "synced_s"))
    synced, inside = await restarted.wait_synced()
    settled = await restarted.settle(quiet=3.0, min_reconciles=total_jobs)
    of = f" [{source.name}]" if source is not None else ""

    def add(key: str, value: float, what: str, target: str = "") -> None:
        report.add(f"{key}{suffix}", value, what.replace(":", f"{of}:", 1), target)

    add("restart_sync_s", round(synced, 3), f"restart: exec to caches synced, {total_jobs} jobs (s)", "<= 5 s")
    add("restart_sync_in_manager_s", round(inside, 3), "restart: of which list+sync in the manager (s)")
    add("restart_ready_s", round(started["ready_s"], 3), "restart: exec to ready (/readyz 200, polled 20 ms) (s)")
    if "synced_cpu_s" in started:
        add("restart_sync_cpu_s", round(started["synced_cpu_s"], 2), "restart: the operator's CPU to caches synced (s)")
    if "first_reconcile_s" in started:
        add("restart_first_reconcile_s", round(started["first_reconcile_s"], 3),
            "restart: exec to the first reconcile's end (s)")
    add("restart_writes", settled.writes(), "restart: writes while reconciling every job once", "0")
    add("restart_reconciles", int(settled.reconciles), "restart: reconciles done")
    add("rss_mb_10k_pods", round(restarted.rss_mb(), 1), f"memory: operator RSS, {pods} pods cached (MB)", "<= 150 MB")
    add("rss_peak_mb_10k_pods", round(restarted.peak_rss_mb(), 1), "memory: operator peak RSS (VmHWM, MB)")
    if settled.writes():
        report.figures[f"restart_writes_by_verb{suffix}"] = {
            k: v for k, v in settled.by_verb().items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE")}
    return restarted


async def latency(kube: KubeClient, operator: BenchOperator, opts: Options, report: Report, namespace: str,
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
