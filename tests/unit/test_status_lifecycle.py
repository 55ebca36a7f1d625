"""mpiop.status.lifecycle: Created and Running, and the replica counts."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import JobStatus, MPIJob, ReplicaStatus
from mpiop.plan import Observed, Plan
from mpiop.status import lifecycle
from testkit.mpijobs import at, make_mpijob
from testkit.pods import PodBuilder, make_pod

JOB = make_mpijob("pi", "ns").workers(2).obj()


def plan_for(job: MPIJob) -> Plan:
    return Plan(status=job.status.model_copy(deep=True))


def true_conditions(status: JobStatus) -> list[str]:
    return [c.type for c in status.conditions if c.status == "True"]


def test_mark_created_once() -> None:
    plan = plan_for(JOB)
    lifecycle.mark_created(plan, JOB, at(0))
    created = plan.status.condition("Created")
    assert created is not None
    assert (created.status, created.reason, created.message) == ("True", "MPIJobCreated", "MPIJob ns/pi is created.")
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "MPIJobCreated")]

    again = Plan(status=plan.status.model_copy(deep=True))
    lifecycle.mark_created(again, JOB, at(10))
    assert again.events == []
    assert again.status == plan.status


def pods_of(launcher: PodBuilder | None, *workers: PodBuilder) -> Observed:
    pods = [w.obj() for w in workers]
    if launcher is not None:
        pods.append(launcher.obj())
    return Observed(pods=pods)


L = make_pod(JOB, "launcher")


def W(i: int) -> PodBuilder:  # noqa: N802 - reads like the pod it stands for
    return make_pod(JOB, "worker", i)


@pytest.mark.parametrize(
    ("observed", "running"),
    [
        (pods_of(None, W(0).running(), W(1).running()), False),
        (pods_of(L, W(0).running(), W(1).running()), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running()), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), W(1)), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), W(1).running().terminating()), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), W(1).running()), True),
        (pods_of(make_pod(JOB, "launcher").ready(), W(0).ready(), W(1).running()), True),
        (pods_of(make_pod(JOB, "launcher", attempt=1).running(), W(0).running(), W(1).running()), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), make_pod(JOB, "worker", 1, 1).running()),
         False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), W(2).running()), False),
        (pods_of(make_pod(JOB, "launcher").running(), W(0).running(), W(1).running(), W(2).running()), True),
    ],
    ids=["no-launcher", "launcher-pending", "worker-missing", "worker-pending", "worker-terminating", "all-running",
         "ready-counts-as-running", "launcher-other-attempt", "worker-other-attempt", "worker-1-missing-extra-worker-2",
         "extra-worker-besides-all"],
)
def test_running_only_when_launcher_and_all_workers_run(observed: Observed, running: bool) -> None:
    plan = plan_for(JOB)
    lifecycle.mark_running(plan, JOB, observed, at(5))
    assert plan.status.is_true("Running") is running
    assert [e.reason for e in plan.events] == (["MPIJobRunning"] if running else [])
    if running:
        condition = plan.status.condition("Running")
        assert condition is not None
        assert condition.message == "MPIJob ns/pi is running."
        assert condition.last_transition_time == at(5)


def test_running_with_no_workers() -> None:
    job = make_mpijob("solo").workers(0).launcher_as_worker().obj()
    plan = plan_for(job)
    lifecycle.mark_running(plan, job, Observed(pods=[make_pod(job, "launcher").running().obj()]), at(1))
    assert plan.status.is_true("Running")


def test_running_clears_restarting_and_is_not_repeated() -> None:
    job = make_mpijob("pi").workers(1).status(restart_count=1).condition("Created").condition("Restarting").obj()
    observed = Observed(pods=[make_pod(job, "launcher", attempt=1).running().obj(),
                              make_pod(job, "worker", 0, 1).running().obj()])
    plan = plan_for(job)
    lifecycle.mark_running(plan, job, observed, at(3))
    assert [f"{c.type}={c.status}" for c in plan.status.conditions] == [
        "Created=True", "Restarting=False", "Running=True"]
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert restarting.reason == "MPIJobRunning"

    again = Plan(status=plan.status.model_copy(deep=True))
    lifecycle.mark_running(again, job, observed, at(9))
    assert again.events == []
    assert again.status == plan.status


def test_replica_statuses_counts() -> None:
    observed = Observed(pods=[
        make_pod(JOB, "launcher").running().obj(),
        W(0).ready().obj(),
        W(1).running().obj(),
        make_pod(JOB, "worker", 2).obj(),  # stale index, still counted as a pod of the job
        make_pod(JOB, "worker", 0, attempt=0).failed().obj(),
        make_pod(JOB, "worker", 1).succeeded().obj(),
        make_pod(JOB, "worker", 1).ready().terminating().obj(),
        make_pod(JOB, "worker", 1).unknown().obj(),
    ])
    counts = lifecycle.replica_statuses(JOB, observed)
    assert counts == {
        "Launcher": ReplicaStatus(
            active=1, succeeded=0, failed=0, ready=0,
            selector="training.kubeflow.org/job-name=pi,training.kubeflow.org/job-role=launcher,"
                     "training.kubeflow.org/operator-name=mpi-operator"),
        "Worker": ReplicaStatus(
            active=4, succeeded=1, failed=1, ready=1,
            selector="training.kubeflow.org/job-name=pi,training.kubeflow.org/job-role=worker,"
                     "training.kubeflow.org/operator-name=mpi-operator"),
    }


@pytest.mark.parametrize(
    ("suspended", "active"),
    [
        (False, 0),  # as a batch Job's status.active: a pod being deleted is not active
        # Suspended (Kueue's preemption): its pods being deleted still hold their GPUs until they end, so Kueue,
        # which releases the quota once no replica is active, admits the next job only then. An ended one does not.
        (True, 2),
    ],
)
def test_a_suspended_jobs_pods_count_active_until_they_are_gone(suspended: bool, active: int) -> None:
    job = make_mpijob("pi", "ns").workers(2).suspend(suspended).obj()
    observed = Observed(pods=[W(0).running().terminating().obj(), W(1).terminating().obj(),
                              make_pod(job, "worker", 2).failed().terminating().obj()])
    assert lifecycle.replica_statuses(job, observed)["Worker"].active == active


def test_replica_statuses_only_for_specified_replicas() -> None:
    job = make_mpijob("solo").without("Worker").obj()
    counts = lifecycle.replica_statuses(job, Observed())
    assert list(counts) == ["Launcher"]
    assert counts["Launcher"].active == 0
    assert counts["Launcher"].to_json()["active"] == 0
