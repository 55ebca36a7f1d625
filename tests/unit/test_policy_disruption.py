"""mpiop.policies.disruption: an evicted or preempted pod restarts the job without spending backoffLimit."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.desired.podgroup import GangScheduler
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from mpiop.policies import disruption, failure
from mpiop.policies.outcome import STOP
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod

CAP = 2


def run(job: MPIJob, pods: list[PodBuilder], cap: int = CAP) -> tuple[bool, Plan]:
    plan = Plan(status=job.status.model_copy(deep=True))
    handled = disruption.apply(plan, job, Observed(pods=[p.obj() for p in pods]), at(100), cap) is STOP
    return handled, plan


def base(backoff: int = 0, restarts: int = 0, disruptions: int = 0) -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(2).backoff_limit(backoff).condition("Created")
            .status(restart_count=restarts or None, disruption_restarts=disruptions or None))


def attempt_pods(job: MPIJob, attempt: int = 0) -> dict[str, PodBuilder]:
    return {"launcher": make_pod(job, "launcher", 0, attempt).running(),
            "worker-0": make_pod(job, "worker", 0, attempt).running().on_node("n1"),
            "worker-1": make_pod(job, "worker", 1, attempt).running().on_node("n2")}


def with_pod(job: MPIJob, which: str, pod: PodBuilder, attempt: int = 0) -> list[PodBuilder]:
    return list({**attempt_pods(job, attempt), which: pod}.values())


@pytest.mark.parametrize(
    ("which", "pod", "summary"),
    [
        ("worker-1", make_pod(base().obj(), "worker", 1).running().on_node("n2").disrupted().terminating(),
         "pi-worker-1 (rank 1, node n2) DisruptionTarget EvictionByEvictionAPI: Eviction API: evicting"),
        ("worker-0", make_pod(base().obj(), "worker", 0).evicted().on_node("n1").disrupted(
            "TerminationByKubelet", "The node was low on resource: memory."),
         "pi-worker-0 (rank 0, node n1) DisruptionTarget TerminationByKubelet: The node was low on resource: memory."),
        ("worker-0", make_pod(base().obj(), "worker", 0).pending().disrupted(
            "PreemptionByScheduler", "pi-big: preempting to accommodate a higher priority pod").terminating(),
         "pi-worker-0 (rank 0) DisruptionTarget PreemptionByScheduler: "
         "pi-big: preempting to accommodate a higher priority pod"),
        ("launcher", make_pod(base().obj(), "launcher").running().disrupted("DeletionByTaintManager", "").terminating(),
         "pi-launcher DisruptionTarget DeletionByTaintManager"),
    ],
    ids=["eviction-api-terminating", "kubelet-node-pressure-failed", "preempted-pending", "taint-manager-launcher"],
)
def test_disruption_restarts_without_spending_backoff_limit(which: str, pod: PodBuilder, summary: str) -> None:
    job = base(backoff=0).condition("Running", when=at(50)).obj()
    handled, plan = run(job, with_pod(job, which, pod))
    assert handled is True
    assert (plan.status.restart_count, plan.status.disruption_restarts) == (1, 1)
    assert not plan.status.finished  # backoffLimit 0: an ordinary failure would have failed the job
    message = ("MPIJob ns/pi is restarting after a disruption (restart 1, disruption 1; not counted against "
               f"backoffLimit 0): {summary}; the attempt's logs are kept in ConfigMap pi-attempt-0")
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert (restarting.status, restarting.reason, restarting.message) == ("True", "MPIJobRestarting", message)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "MPIJobRestarting", message)]
    assert plan.status.last_failure is not None
    reason = summary.split(" DisruptionTarget ")[1].split(":")[0].split(";")[0]
    assert (plan.status.last_failure.reason, plan.status.last_failure.pod) == (reason, podstate.name(pod.obj()))
    going = {podstate.name(pod.obj())} if podstate.is_terminating(pod.obj()) else set()
    assert sorted(podstate.name(p) for p in plan.pods_to_delete) == sorted(
        {"pi-launcher", "pi-worker-0", "pi-worker-1"} - going)


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (make_pod(base().obj(), "worker", 1).running().disrupted(), "condition on a pod that neither goes nor failed"),
        (make_pod(base().obj(), "worker", 1).running().terminating(), "deleted without a disruption (e.g. by mpiop)"),
        (make_pod(base().obj(), "worker", 1).failed(exit_code=137), "an ordinary failure: policies/failure's"),
    ],
    ids=["not-going", "plain-deletion", "plain-failure"],
)
def test_not_a_disruption(pod: PodBuilder, why: str) -> None:
    job = base().obj()
    handled, plan = run(job, with_pod(job, "worker-1", pod))
    assert handled is False, why
    assert (plan.status, plan.pods_to_delete, plan.events) == (job.status, [], [])


def test_old_attempts_disrupted_pod_is_not_counted_again() -> None:
    job = base(restarts=1, disruptions=1).obj()
    old = make_pod(job, "worker", 1, attempt=0).running().disrupted().terminating()
    handled, _ = run(job, [*attempt_pods(job, attempt=1).values(), old])
    assert handled is False


def test_a_disruption_is_blamed_before_the_launcher_it_made_fail() -> None:
    job = base(backoff=0).obj()
    pods = with_pod(job, "launcher", make_pod(job, "launcher").failed(exit_code=1))
    pods = [p for p in pods if podstate.name(p.obj()) != "pi-worker-1"]
    pods.append(make_pod(job, "worker", 1).running().disrupted().terminating())
    handled, plan = run(job, pods)
    assert handled is True
    assert not plan.status.finished
    assert plan.status.last_failure is not None and plan.status.last_failure.pod == "pi-worker-1"


@pytest.mark.parametrize(("backoff", "restarts", "failed"), [(0, 2, True), (1, 2, False)],
                         ids=["budget-spent", "budget-left"])
def test_past_the_cap_a_disruption_counts_against_backoff_limit(backoff: int, restarts: int, failed: bool) -> None:
    job = base(backoff=backoff, restarts=restarts, disruptions=CAP).obj()
    pod = make_pod(job, "worker", 0, attempt=restarts).running().disrupted().terminating()
    handled, plan = run(job, with_pod(job, "worker-0", pod, attempt=restarts))
    assert handled is True
    assert plan.status.disruption_restarts == CAP
    assert plan.status.is_true("Failed") is failed
    condition = plan.status.condition("Failed" if failed else "Restarting")
    assert condition is not None and condition.message is not None
    assert f"(past --max-disruption-restarts {CAP}: counted as a failure)" in condition.message
    if not failed:
        assert plan.status.restart_count == restarts + 1
        assert f"(restart {restarts + 1}, failure 1 of backoffLimit 1)" in condition.message


def test_disruptions_leave_the_backoff_budget_to_failures() -> None:
    """Two disruptions then a crash under backoffLimit 1: the crash is the first counted failure, a restart."""
    job = base(backoff=1, restarts=2, disruptions=2).obj()
    pods = with_pod(job, "worker-0", make_pod(job, "worker", 0, attempt=2).failed(exit_code=1), attempt=2)
    plan = Plan(status=job.status.model_copy(deep=True))
    assert failure.apply(plan, job, Observed(pods=[p.obj() for p in pods]), at(100)) is STOP
    assert not plan.status.finished
    assert (plan.status.restart_count, plan.status.disruption_restarts) == (3, 2)
    restarting = plan.status.condition("Restarting")
    assert restarting is not None and restarting.message is not None
    assert "(restart 3, failure 1 of backoffLimit 1)" in restarting.message


PREEMPTED = ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority podgroup")
GANG = Settings(gang_scheduler=GangScheduler("kubernetes"), stop_grace_seconds=20)


def preempted(job: MPIJob, which: str, attempt: int = 0) -> PodBuilder:
    """One of the attempt's running pods as the cache last held it when the scheduler's preemption took it."""
    return attempt_pods(job, attempt)[which].disrupted(*PREEMPTED).terminating()


RUNNING = base(backoff=0).condition("Running", when=at(50)).obj()
RESTARTED = base(backoff=0, restarts=1, disruptions=1).condition("Running", when=at(50)).obj()


@pytest.mark.parametrize(
    ("job", "live", "gone", "blamed", "deleted", "created"),
    [
        # The scheduler's preemption of a gang on nodes no kubelet runs: every pod gone before a pass saw it going.
        (RUNNING, [], [preempted(RUNNING, w) for w in ("launcher", "worker-0", "worker-1")], "pi-launcher", [], []),
        # Some gone, some still going: the one still seen is blamed, what is left is deleted.
        (RUNNING, [preempted(RUNNING, "worker-1")], [preempted(RUNNING, "launcher"), preempted(RUNNING, "worker-0")],
         "pi-worker-1", [], []),
        # The launcher gone, the workers not reached yet: they go (at once: no mpirun is left to tell).
        (RUNNING, [attempt_pods(RUNNING)["worker-0"], attempt_pods(RUNNING)["worker-1"]],
         [preempted(RUNNING, "launcher")], "pi-launcher", ["pi-worker-0", "pi-worker-1"], []),
        # An earlier attempt's, counted at its time: the next attempt's pods are made.
        (RESTARTED, [], [preempted(RESTARTED, "launcher")], None, [], ["pi-worker-0", "pi-worker-1", "pi-launcher-1"]),
        # Nothing remembered (deleted by someone else without DisruptionTarget, or while no operator ran): made again
        # into the same attempt, as before.
        (RUNNING, [], [], None, [], ["pi-worker-0", "pi-worker-1", "pi-launcher"]),
    ],
    ids=["all-gone", "some-gone", "launcher-gone", "earlier-attempt", "nothing-remembered"],
)
def test_a_disrupted_pod_gone_before_a_pass_saw_it_going_restarts_the_job(
        job: MPIJob, live: list[PodBuilder], gone: list[PodBuilder], blamed: str | None, deleted: list[str],
        created: list[str]) -> None:
    observed = Observed(pods=[p.obj() for p in live], disrupted_gone=[p.obj() for p in gone])
    plan = decide(job, observed, at(100), GANG)
    assert sorted(podstate.name(p) for p in plan.pods_to_delete) == deleted
    assert plan.pod_grace_seconds == {}
    assert [p["metadata"]["name"] for p in plan.creation_steps.pods()] == created
    if blamed is None:
        assert plan.status.restart_count == job.status.restart_count
        return
    assert (plan.status.restart_count, plan.status.disruption_restarts) == (1, 1)
    assert not plan.status.finished  # backoffLimit 0: a failure counted would have failed the job
    assert plan.status.last_failure is not None
    assert (plan.status.last_failure.reason, plan.status.last_failure.pod) == ("PreemptionByScheduler", blamed)
    running, stopping = plan.status.condition("Running"), plan.status.condition("Stopping")
    assert running is not None and (running.status, running.reason) == ("False", "MPIJobRestarting")
    assert stopping is None  # no launcher left to tell: nothing to hold
    restarting = plan.status.condition("Restarting")
    assert restarting is not None and restarting.message is not None
    assert restarting.message.startswith(
        "MPIJob ns/pi is restarting after a disruption (restart 1, disruption 1; not counted against backoffLimit 0): "
        f"{blamed}")
    assert "DisruptionTarget PreemptionByScheduler: default-scheduler: preempting" in restarting.message
