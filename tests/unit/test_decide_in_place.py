"""Whole lifetimes of jobs whose launcher or workers run under restartPolicy OnFailure: the kubelet
restarts a failed container in place, the job counts each failed run against backoffLimit, and fails with
BackoffLimitExceeded past it instead of staying Running on a pod in CrashLoopBackOff."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from mpiop import metrics
from mpiop.api.v2beta1 import ReplicaType
from mpiop.controller.trims import trim_pod
from mpiop.status import failure_report
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.restarts import crash_looping, crashed, healed, rerunning
from testkit.world import World, names_of, running


def kubelet(world: World, name: str, status: dict[str, Any]) -> None:
    """The kubelet's view of one pod changes (its spec, restartPolicy OnFailure included, is kept)."""
    world.pods[name] = trim_pod({**world.pods[name], "status": status})


def started(job: MPIJobBuilder) -> World:
    world = World(job.obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    assert world.state == "Running"
    return world


def on_failure(replica: ReplicaType, limit: int) -> MPIJobBuilder:
    return make_mpijob("pi", "ns").workers(2).restart_policy(replica, "OnFailure").backoff_limit(limit)


@pytest.mark.parametrize("limit", [0, 1, 6])
@pytest.mark.parametrize(("replica", "pod"), [("Launcher", "pi-launcher"), ("Worker", "pi-worker-1")])
def test_restarts_in_place_up_to_backoff_limit_then_failed(replica: ReplicaType, pod: str, limit: int) -> None:
    world = started(on_failure(replica, limit).ttl(60))
    for failures in range(1, limit + 1):
        now = 10 * failures
        kubelet(world, pod, crashed(failures))
        plan = world.reconcile(now)
        assert [e.reason for e in plan.events] == ["ContainerRestarted"]
        assert (plan.objects_to_create, plan.pods_to_delete) == ([], []), (
            "nothing else restarts: mpirun reruns on the same workers")
        assert world.state == "Running"
        message = world.job.status.condition("Running").message  # type: ignore[union-attr]
        assert message is not None and message.endswith(f"; failure {failures} of backoffLimit {limit}")

        kubelet(world, pod, rerunning(failures))
        plan = world.reconcile(now + 1)
        assert (plan.events, plan.objects_to_create, plan.pods_to_delete) == ([], [], []), (
            "the same failure is counted once")

    kubelet(world, pod, crashed(limit + 1))
    plan = world.reconcile(100)
    assert world.state == "Failed"
    failed = world.job.status.condition("Failed")
    assert failed is not None and failed.reason == "BackoffLimitExceeded"
    assert failed.message is not None and "container main Error exit 1" in failed.message
    assert failed.message.startswith(f"MPIJob ns/pi has failed (backoffLimit {limit} exceeded: {limit + 1} failures")
    assert [e.reason for e in plan.events] == ["BackoffLimitExceeded"]
    assert world.job.status.completion_time == at(100)
    assert world.job.status.restart_count is None, "no whole-job restart"
    assert pod in names_of(plan.pods_to_delete), "cleanPodPolicy Running: the crash-looping pod goes too"

    world.gone()
    plan = world.reconcile(110)
    assert (plan.objects_to_create, plan.events) == ([], [])
    assert plan.requeue_after == 50, "TTL counts from completionTime"
    assert world.reconcile(160).delete_mpijob


def test_launcher_that_healed_succeeds() -> None:
    world = started(on_failure("Launcher", 1))
    kubelet(world, "pi-launcher", crashed(1))
    world.reconcile(5)
    kubelet(world, "pi-launcher", rerunning(1))
    world.reconcile(6)
    kubelet(world, "pi-launcher", healed(1))
    plan = world.reconcile(30)
    assert world.state == "Succeeded"
    assert [e.reason for e in plan.events] == ["MPIJobSucceeded"]


def test_failure_report_reads_the_previous_run() -> None:
    world = started(on_failure("Launcher", 1))
    kubelet(world, "pi-launcher", crash_looping(2))
    observed = world.observed()
    assert failure_report.log_request(world.job, observed, 0) == failure_report.LogRequest(
        "pi-launcher", "main", previous=True)


def test_deadline_holds_for_a_crash_looping_launcher() -> None:
    world = started(on_failure("Launcher", 6).deadline(30))
    kubelet(world, "pi-launcher", crash_looping(2))
    world.reconcile(10)
    assert world.state == "Running"
    plan = world.reconcile(31)
    assert world.state == "Failed"
    assert world.job.status.condition("Failed").reason == "DeadlineExceeded"  # type: ignore[union-attr]
    assert "pi-launcher" in names_of(plan.pods_to_delete)


def test_failed_counter_moves_once() -> None:
    world = started(on_failure("Launcher", 0))
    before = world.job
    kubelet(world, "pi-launcher", crashed(1))
    world.reconcile(5)
    failed = REGISTRY.get_sample_value("mpi_operator_jobs_failed_total") or 0.0
    metrics.count_transitions(before, world.job.status, at(5))
    metrics.count_transitions(world.job, world.job.status, at(6))
    assert REGISTRY.get_sample_value("mpi_operator_jobs_failed_total") == failed + 1
    assert metrics.job_phase({"status": world.job.status.model_dump(by_alias=True)}) == "Failed"
