"""The sustained-rate phase: MPIJobs arrive at a steady rate for minutes, each runs briefly and is deleted
by its TTL, as on a busy shared cluster. A burst measures throughput; this measures whether the operator
keeps up: its work queue must stay shallow and a new job's first status must come within seconds however
long the arrivals go on.

Every job has 1 worker; its launcher finishes by itself `--sustained-run-seconds` after it runs (the
simulated cluster's finish Stage), and `ttlSecondsAfterFinished` deletes it. Every `--sustained-report`
seconds one line: jobs submitted, the operator's queue depth, reconciles/s, its CPU, and the p50/p99/max of
create -> first status (the Created condition) of the jobs whose first status came in that window. Each
rate in `--rates` runs `--sustained-seconds` in its own namespace; figures per rate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.harness import Tracker, bench_job, delete_namespace, fresh_namespace, percentile
from bench.operator import BenchOperator
from bench.report import Options, Report, log
from devcluster.simulated import FINISH_AFTER_ANNOTATION, FINISH_LABEL
from mpiop.api.raw import JSON
from mpiop.kube.client import MPIJOBS, ApiError, KubeClient


def sustained_job(name: str, run_seconds: float, ttl: int) -> JSON:
    manifest = bench_job(name, 1)
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    metadata = launcher.setdefault("metadata", {})
    metadata.setdefault("labels", {})[FINISH_LABEL] = "Succeeded"
    metadata.setdefault("annotations", {})[FINISH_AFTER_ANNOTATION] = f"{run_seconds:g}s"
    manifest["spec"].setdefault("runPolicy", {})["ttlSecondsAfterFinished"] = ttl
    return manifest


@dataclass
class Window:
    started: float
    latencies: list[float] = field(default_factory=list)


def _summary(values: list[float]) -> str:
    if not values:
        return "p50      -  p99      -  max      -"
    return (f"p50 {percentile(values, 50):6.2f}  p99 {percentile(values, 99):6.2f}  max {max(values):6.2f}")


async def sustained(kube: KubeClient, operator: BenchOperator, opts: Options, report: Report) -> None:
    for rate in opts.sustained_rates:
        await one_rate(kube, operator, opts, report, rate)


async def one_rate(kube: KubeClient, operator: BenchOperator, opts: Options, report: Report, rate: float) -> None:
    namespace = f"bench-sustained-{str(rate).replace('.', '-')}"
    tag = f"sustained_{rate:g}".replace(".", "_")
    await fresh_namespace(kube, namespace)
    total = int(rate * opts.sustained_seconds)
    log(f"sustained: {rate:g} jobs/s for {opts.sustained_seconds:g}s ({total} jobs of 1 worker, launcher runs "
        f"{opts.sustained_run_seconds:g}s, TTL {opts.sustained_ttl}s)")
    sent: dict[str, float] = {}
    first_status: dict[str, float] = {}
    window = Window(time.monotonic())
    every: list[float] = []
    queue_depths: list[float] = []
    failures: list[str] = []
    async with Tracker(kube, namespace) as tracker:
        def on_condition(job: str, condition: str, at: float) -> None:
            if condition == "Created" and job in sent and job not in first_status:
                first_status[job] = at
                window.latencies.append(at - sent[job])
                every.append(at - sent[job])

        tracker.on_condition.append(on_condition)

        async def submit(name: str) -> None:
            sent[name] = time.monotonic()
            try:
                await kube.create(MPIJOBS, namespace, sustained_job(name, opts.sustained_run_seconds,
                                                                    opts.sustained_ttl))
            except ApiError as error:
                failures.append(f"{name}: {error}")

        async def report_windows() -> None:
            before, cpu_before = await operator.metrics(), operator.cpu_seconds()
            while True:
                await asyncio.sleep(opts.sustained_report)
                now_metrics, cpu = await operator.metrics(), operator.cpu_seconds()
                elapsed = time.monotonic() - started
                span = time.monotonic() - window.started
                queue_depths.append(now_metrics.queue_depth)
                reconciles = (now_metrics.reconciles - before.reconciles) / span
                log(f"  t={elapsed:5.0f}s sent {len(sent):5d} status {len(first_status):5d} "
                    f"queue {now_metrics.queue_depth:4.0f} reconciles/s {reconciles:5.1f} "
                    f"cpu {100 * (cpu - cpu_before) / span:3.0f}%  create->first status (s) "
                    f"{_summary(window.latencies)}")
                before, cpu_before = now_metrics, cpu
                window.started, window.latencies = time.monotonic(), []

        started = time.monotonic()
        reporter = asyncio.create_task(report_windows())
        submissions: list[asyncio.Task[None]] = []
        cpu_start = operator.cpu_seconds()
        for i in range(total):
            due = started + i / rate
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            submissions.append(asyncio.create_task(submit(f"s-{i}")))
        await asyncio.gather(*submissions)
        submitted = time.monotonic() - started
        try:
            await tracker.wait_until(lambda: len(first_status) >= total - len(failures), opts.timeout,
                                     "every sustained job's first status")
        finally:
            reporter.cancel()
        cpu = operator.cpu_seconds() - cpu_start
        elapsed = time.monotonic() - started
    if failures:
        log(f"sustained: {len(failures)} creations refused, e.g. {failures[0]}")
    report.add(f"{tag}_p50_s", round(percentile(every, 50), 3), f"sustained {rate:g}/s: create->first status p50 (s)")
    report.add(f"{tag}_p99_s", round(percentile(every, 99), 3), f"sustained {rate:g}/s: create->first status p99 (s)",
               "<= 2 s")
    report.add(f"{tag}_max_s", round(max(every), 3), f"sustained {rate:g}/s: create->first status max (s)")
    report.add(f"{tag}_queue_max", max(queue_depths, default=0.0), f"sustained {rate:g}/s: work queue depth, max")
    report.add(f"{tag}_submit_s", round(submitted, 1), f"sustained {rate:g}/s: seconds to submit {total} jobs")
    report.add(f"{tag}_operator_cpu_pct", round(100 * cpu / elapsed, 1), f"sustained {rate:g}/s: operator CPU (%)")
    await operator.settle(quiet=3.0)
    gone = await delete_namespace(kube, namespace)
    log(f"sustained: namespace deleted in {gone:.1f}s")
