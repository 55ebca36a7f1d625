"""mpiop.policies.success: the job succeeds when the current attempt's launcher does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mpiop import names
from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import failure, success
from mpiop.policies.outcome import CONTINUE, STOP
from mpiop.status import failure_report
from testkit.mpijobs import at, make_mpijob
from testkit.pods import PodBuilder, make_pod


def plan_for(job: MPIJob) -> Plan:
    return Plan(status=job.status.model_copy(deep=True))


def true_conditions(status: JobStatus) -> list[str]:
    return [c.type for c in status.conditions if c.status == "True"]


def test_succeeded_sets_completion_time_and_ends_running() -> None:
    job = make_mpijob("pi", "ns").workers(1).condition("Created").condition("Running").obj()
    observed = Observed(pods=[make_pod(job, "launcher").succeeded().obj(),
                              make_pod(job, "worker", 0).running().obj()])
    plan = plan_for(job)
    assert success.apply(plan, job, observed, at(60)) is STOP
    assert plan.status.completion_time == at(60)
    assert true_conditions(plan.status) == ["Created", "Succeeded"]
    assert plan.status.conditions[-1].type == "Succeeded"
    succeeded = plan.status.condition("Succeeded")
    assert succeeded is not None
    assert (succeeded.reason, succeeded.message) == ("MPIJobSucceeded", "MPIJob ns/pi successfully completed.")
    running = plan.status.condition("Running")
    assert running is not None
    assert running.status == "False"
    assert [e.reason for e in plan.events] == ["MPIJobSucceeded"]

    again = Plan(status=plan.status.model_copy(deep=True))
    assert success.apply(again, job, observed, at(90)) is STOP
    assert again.status.completion_time == at(60)
    assert again.events == []


def test_succeeded_launcher_of_old_attempt_is_ignored() -> None:
    job = make_mpijob("pi").workers(1).status(restart_count=1).obj()
    plan = plan_for(job)
    assert success.apply(plan, job, Observed(pods=[make_pod(job, "launcher", attempt=0).succeeded().obj()]),
                          at(1)) is CONTINUE
    assert plan.status.completion_time is None
    assert not plan.status.is_true("Succeeded")


def _running(b: PodBuilder) -> PodBuilder:
    return b.running().on_node("n1")


def _deleted(b: PodBuilder) -> PodBuilder:
    return b.running().on_node("n1").terminating()


def _failed(b: PodBuilder) -> PodBuilder:
    return b.failed(exit_code=137, reason="Error").on_node("n1")


Worker = Callable[[PodBuilder], PodBuilder] | None  # None: the pod is gone


# A launcher that Succeeded, and the workers (index -> state) seen in the same pass: (wanted count, the workers,
# runLauncherAsWorker, what the job becomes, the restart message's blame).
LOST_WORKER_CASES = {
    "all workers running": (2, {0: _running, 1: _running}, False, "Succeeded", None),
    "a worker already done": (2, {0: _running, 1: lambda b: b.succeeded()}, False, "Succeeded", None),
    "worker 1 being deleted (Open MPI 5 exit 0)": (
        2, {0: _running, 1: _deleted}, False, "Restarting",
        "worker pi-worker-1 (rank 1, node n1) was deleted while the launcher ran; "
        "the launcher pi-launcher exited 0 without all its ranks"),
    "worker 0 gone": (2, {0: None, 1: _running}, False, "Restarting",
                      "worker pi-worker-0 (ranks 0, gone) was gone while the launcher ran"),
    "worker 1 failed": (2, {0: _running, 1: _failed}, False, "Restarting",
                        "worker pi-worker-1 (rank 1, node n1) container main Error exit 137 while the launcher ran"),
    "worker 1 made again under the launcher (the deleted one gone)": (
        2, {0: _running, 1: lambda b: _running(b).replacement()}, False, "Restarting",
        "worker pi-worker-1 (rank 1, node n1) was made again (its predecessor lost) while the launcher ran"),
    "workers made with the launcher": (2, {0: lambda b: _running(b).created(at(0)), 1: _running}, False,
                                      "Succeeded", None),
    # Stamped by another apiserver whose clock is ahead, or in the next second: not made under the launcher.
    "a worker a second younger than the launcher, made before it": (
        2, {0: _running, 1: lambda b: _running(b).created(at(1))}, False, "Succeeded", None),
    "a worker made under an earlier launcher of the same name (deleted, made again)": (
        2, {0: _running, 1: lambda b: _running(b).label(names.REPLACEMENT_LABEL, "uid-of-a-launcher-gone")}, False,
        "Succeeded", None),
    "scale-down: worker 2 (index >= replicas) being deleted": (
        2, {0: _running, 1: _running, 2: _deleted}, False, "Succeeded", None),
    "scale-down: worker 2 gone": (2, {0: _running, 1: _running, 2: None}, False, "Succeeded", None),
    "runLauncherAsWorker, no workers wanted": (0, {}, True, "Succeeded", None),
    "runLauncherAsWorker, its worker deleted": (
        1, {0: _deleted}, True, "Restarting", "worker pi-worker-0 (rank 1, node n1) was deleted"),
}


@pytest.mark.parametrize(("count", "workers", "launcher_works", "becomes", "blame"), LOST_WORKER_CASES.values(),
                         ids=LOST_WORKER_CASES.keys())
def test_launcher_succeeded_after_losing_a_worker_restarts(
        count: int, workers: dict[int, Worker], launcher_works: bool, becomes: str, blame: str | None) -> None:
    """mpirun may exit 0 after losing a worker (Open MPI 5.0.7's prterun did): a wanted worker that failed, is being
    deleted or is gone in the pass that sees the launcher Succeeded fails the attempt instead; workers beyond the
    count (a scale-down) do not."""
    job = make_mpijob("pi", "ns").workers(count).launcher_as_worker(launcher_works).condition("Created").obj()
    pods = [make_pod(job, "launcher").created(at(0)).succeeded().obj()]
    pods += [change(make_pod(job, "worker", i)).obj() for i, change in workers.items() if change is not None]
    observed = Observed(pods=pods)
    plan = plan_for(job)
    succeeded = success.apply(plan, job, observed, at(9)) is STOP
    assert succeeded or failure.apply(plan, job, observed, at(9)) is STOP
    assert plan.status.conditions[-1].type == becomes
    restarting = plan.status.condition("Restarting")
    if blame is None:
        assert restarting is None and plan.pods_to_delete == []
        return
    assert restarting is not None and restarting.message is not None
    assert restarting.message.startswith("MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): " + blame)
    assert plan.status.restart_count == 1
    assert plan.status.completion_time is None
    assert plan.status.last_failure is not None and (plan.status.last_failure.pod or "?") in restarting.message
    going = sorted(p["metadata"]["name"] for p in pods if "deletionTimestamp" not in p["metadata"])
    assert sorted(p["metadata"]["name"] for p in plan.pods_to_delete) == going, "the rest of the attempt is deleted"


def test_lost_worker_report_is_for_a_succeeded_launcher_only() -> None:
    """While the launcher runs, a deleted worker is mpirun's to notice (it fails, or exits 0 later)."""
    job = make_mpijob("pi", "ns").workers(2).obj()
    for launcher in (make_pod(job, "launcher").running(), make_pod(job, "launcher").failed()):
        observed = Observed(pods=[launcher.obj(), _deleted(make_pod(job, "worker", 0)).obj(),
                                  _running(make_pod(job, "worker", 1)).obj()])
        assert failure_report.lost_worker_report(job, observed, 0) is None
    old = Observed(pods=[make_pod(job, "launcher").succeeded().obj()])  # attempt 0's, the job is in attempt 1
    assert failure_report.lost_worker_report(job, old, 1) is None


# The launcher's recorded worker count against the job's count now: (job's workers, the launcher's
# LAUNCHED_WORKERS_LABEL (None: a launcher made before mpiop recorded it), the workers, what the job becomes).
LAUNCHED_WITH_CASES = {
    "scale-up: worker 2 made after the launcher": (3, 2, {0: _running, 1: _running,
                                                         2: lambda b: _running(b).created(at(5))}, "Succeeded"),
    "scale-up: worker 2 made under the launcher": (3, 2, {0: _running, 1: _running,
                                                         2: lambda b: _running(b).replacement()}, "Succeeded"),
    "scale-up: worker 2 not made yet": (3, 2, {0: _running, 1: _running}, "Succeeded"),
    "scale-up: worker 1 made again below the launcher's count": (
        3, 2, {0: _running, 1: lambda b: _running(b).replacement(), 2: _running}, "Restarting"),
    "an older launcher without the count: a worker made after it": (
        2, None, {0: _running, 1: lambda b: _running(b).created(at(5))}, "Succeeded"),
    "an older launcher without the count: a worker being deleted": (2, None, {0: _running, 1: _deleted},
                                                                    "Restarting"),
}


@pytest.mark.parametrize(("count", "launched", "workers", "becomes"), LAUNCHED_WITH_CASES.values(),
                         ids=LAUNCHED_WITH_CASES.keys())
def test_workers_added_by_a_scale_up_are_not_lost(count: int, launched: int | None, workers: dict[int, Worker],
                                                  becomes: str) -> None:
    """A worker made after the launcher replaces a lost one only below the count the launcher started with
    (names.LAUNCHED_WORKERS_LABEL); an elastic job scaled up while mpirun ran still Succeeds."""
    job = make_mpijob("pi", "ns").workers(count).condition("Created").obj()
    pods = [make_pod(job, "launcher").launched_workers(launched).created(at(0)).succeeded().obj()]
    pods += [change(make_pod(job, "worker", i)).obj() for i, change in workers.items() if change is not None]
    observed = Observed(pods=pods)
    plan = plan_for(job)
    assert STOP in (success.apply(plan, job, observed, at(9)), failure.apply(plan, job, observed, at(9)))
    assert plan.status.conditions[-1].type == becomes


@pytest.mark.parametrize("workers", [{0: _running}, {}], ids=["its worker running", "its worker gone"])
def test_a_launcher_being_deleted_decides_nothing(workers: dict[int, Callable[[PodBuilder], PodBuilder]]) -> None:
    """Deleted because its worker's port moved (or a suspend), it may still exit 0 on its way out: neither a
    success nor a lost worker; its successor's outcome is the attempt's."""
    job = make_mpijob("pi", "ns").workers(1).condition("Created").obj()
    pods = [make_pod(job, "launcher").succeeded().terminating().obj()]
    pods += [change(make_pod(job, "worker", i)).obj() for i, change in workers.items()]
    observed = Observed(pods=pods)
    plan = plan_for(job)
    assert success.apply(plan, job, observed, at(5)) is CONTINUE
    assert failure_report.lost_worker_report(job, observed, 0) is None
    assert failure.apply(plan, job, observed, at(5)) is CONTINUE
    assert not plan.status.is_true("Succeeded") and plan.status.restart_count is None
