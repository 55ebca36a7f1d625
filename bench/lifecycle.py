"""The lifecycle floor: the floor plus the rest of what mpiop's defaults make each job cost, with no operator
process.

The floor (`phases.floor`) creates each job's objects and first status through a bare client. Here the bench
also plays the barest operator: once a job's pods all run, it writes what mpiop's own `decide()`
plans for that moment (the Running status, the MPIJobRunning Event, discover_hosts.sh), finishes the launcher
as the burst does, and writes what `decide()` plans then (the Succeeded status and Event, and one DELETE
collection of the workers under cleanPodPolicy Running). No informers, no queue, no reconciles. It follows the
operator's flags the bench was given (`--operator-arg`), e.g. `--no-lifecycle-events`.

So "every job Running" here is as early as an operator that writes each job's transitions as they happen
can make it on this machine (its own CPU, in the bench process, is about half mpiop's): burst / lifecycle is
what mpiop's own work adds, lifecycle / floor what the defaults' requests add.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import time

from bench.cpu import CpuMeter
from bench.harness import (
    Tracker,
    bench_job,
    delete_namespace,
    finish_pod,
    fresh_namespace,
    launcher_of,
    owned_objects,
)
from bench.phases import create_jobs_directly
from bench.report import FLOOR_MANAGER, Options, Report, log
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob, format_time
from mpiop.controller import bulk_delete
from mpiop.controller.events import EventRecorder
from mpiop.controller.manager import ManagerConfig
from mpiop.controller.soft_writes import status_change
from mpiop.controller.trims import trim_config_map, trim_pod, trim_secret, trim_service
from mpiop.decide import decide
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, KubeClient
from mpiop.plan import Observed, Plan
from mpiop.run_flags import add_run_arguments, config_from_args

NAMESPACE = "bench-lifecycle"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def observed(made: list[JSON], launcher_phase: str = "Running") -> Observed:
    """A job's objects as made (`owned_objects`), every pod Running and Ready, the launcher in `launcher_phase`."""
    by_kind: dict[str, list[JSON]] = {}
    for obj in made:
        by_kind.setdefault(obj["kind"], []).append(obj)
    pods = []
    for pod in by_kind["Pod"]:
        launcher = pod["metadata"]["labels"].get(names.JOB_ROLE_LABEL) == names.LAUNCHER_ROLE
        phase = launcher_phase if launcher else "Running"
        pods.append(trim_pod({**pod, "status": {
            "phase": phase, "conditions": [{"type": "Ready", "status": str(phase == "Running")}]}}))
    return Observed(pods=pods, config_map=trim_config_map(by_kind["ConfigMap"][0]),
                    secret=trim_secret(by_kind["Secret"][0]), service=trim_service(by_kind["Service"][0]))


def operator_config(operator_args: list[str]) -> ManagerConfig:
    """The operator's flags the bench was given (e.g. --no-lifecycle-events), read by the operator's own parser."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return config_from_args(parser.parse_args(operator_args))


class BareOperator:
    """Carries out decide()'s plan for the two moments after creation, with a bare client."""

    def __init__(self, kube: KubeClient, namespace: str, jobs: int, operator_args: list[str]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.jobs = jobs
        config = operator_config(operator_args)
        self.settings = config.settings
        self.recorder = EventRecorder(kube, unsent_reasons=config.unsent_event_reasons())
        self.running_at: dict[str, float] = {}  # job -> when its Running status write answered
        self.all_running = asyncio.Event()

    async def write(self, raw: JSON, seen: Observed) -> tuple[JSON, Plan]:
        """decide(), then its status, Events, ConfigMap patch and pod deletions; the job as written."""
        job, now = MPIJob.model_validate(raw), _now()
        plan = decide(job, seen, now, self.settings)
        patch = status_change(job.status, plan.status).patch
        if patch is not None:
            patch["lastReconcileTime"] = format_time(now)
            raw = await self.kube.patch(MPIJOBS, self.namespace, job.metadata.name, {"status": patch},
                                        subresource="status")
        for event in plan.events:
            self.recorder.record(job, event, now)
        for obj in plan.objects_to_update:
            await self.kube.patch(CONFIGMAPS, self.namespace, obj["metadata"]["name"], {"data": obj["data"]})
        collection = bulk_delete.collection_for(job, plan.pods_to_delete, seen.pods)
        if collection is not None:
            await self.kube.delete_collection(PODS, self.namespace, label_selector=collection.label_selector,
                                              field_selector=collection.field_selector)
        return raw, plan

    async def run_and_finish(self, raw: JSON, made: list[JSON]) -> None:
        name = raw["metadata"]["name"]
        raw, plan = await self.write(raw, observed(made))
        assert plan.status.is_true("Running"), f"{name}: decide() did not plan Running: {plan.status}"
        self.running_at[name] = time.monotonic()
        if len(self.running_at) == self.jobs:
            self.all_running.set()
        await finish_pod(self.kube, self.namespace, launcher_of(name))
        _, plan = await self.write(raw, observed(made, launcher_phase="Succeeded"))
        assert plan.status.is_true("Succeeded"), f"{name}: decide() did not plan Succeeded: {plan.status}"


async def lifecycle_floor(kube: KubeClient, opts: Options, report: Report, pids: dict[str, int] | None = None) -> None:
    """`pids`: processes whose CPU until every job Running is reported (`lifecycle_cpu_s`)."""
    await fresh_namespace(kube, NAMESPACE)
    manifests = [bench_job(f"life-{i}", opts.workers, managed_by=FLOOR_MANAGER, clean_pod_policy=opts.clean_pod_policy)
                 for i in range(opts.jobs)]
    log(f"lifecycle floor: {opts.jobs} jobs x {opts.workers} workers, a bare client doing what decide() plans")
    operator = BareOperator(kube, NAMESPACE, opts.jobs, opts.operator_args)
    discover_hosts = operator.settings.discover_hosts
    made: dict[str, tuple[JSON, list[JSON]]] = {}
    running_pods: dict[str, int] = {}
    started_jobs: list[asyncio.Task[None]] = []

    def on_pod_running(pod: JSON) -> None:
        job = (pod["metadata"].get("labels") or {}).get(names.JOB_NAME_LABEL)
        if job is None:
            return
        running_pods[job] = running_pods.get(job, 0) + 1
        if running_pods[job] == opts.workers + 1:
            started_jobs.append(asyncio.create_task(operator.run_and_finish(*made[job])))

    async with Tracker(kube, NAMESPACE) as tracker:
        tracker.on_pod_running.append(on_pod_running)
        meter = CpuMeter(pids or {})
        started = time.monotonic()
        await create_jobs_directly(kube, NAMESPACE, manifests, opts.concurrency, opts.reconcile_workers, made=made,
                                   build=functools.partial(owned_objects, discover_hosts=discover_hosts))
        pods = opts.jobs * (opts.workers + 1)
        exist = await tracker.wait_until(lambda: len(tracker.pod_added) >= pods, opts.timeout, "lifecycle pods")
        await asyncio.wait_for(operator.all_running.wait(), opts.timeout)
        report.figures["lifecycle_cpu_s"] = meter.stop()
        all_running = max(operator.running_at.values())
        await asyncio.gather(*started_jobs)
        done = time.monotonic()
        await operator.recorder.close(timeout=60)
    report.add("lifecycle_s", round(exist - started, 3), "lifecycle floor: every pod exists (s)")
    report.add("lifecycle_running_s", round(all_running - started, 3),
               "lifecycle floor: every job Running (s), the barest operator")
    report.add("lifecycle_succeeded_s", round(done - started, 3), "lifecycle floor: every job Succeeded (s)")
    gone = await delete_namespace(kube, NAMESPACE)
    log(f"lifecycle namespace deleted in {gone:.1f}s")
