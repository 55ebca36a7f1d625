"""mpiop.policies.suspend: a suspended job has no pods; resuming notes Suspended False."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import suspend
from mpiop.policies.outcome import STOP
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod


def run(job: MPIJob, observed: Observed, now: float = 50) -> tuple[bool, Plan]:
    plan = Plan(status=job.status.model_copy(deep=True))
    return suspend.apply(plan, job, observed, at(now)) is STOP, plan


@pytest.mark.parametrize(("value", "expected"), [(None, False), (False, False), (True, True)],
                         ids=["unset", "false", "true"])
def test_is_suspended(value: bool | None, expected: bool) -> None:
    builder = make_mpijob("pi")
    if value is not None:
        builder.suspend(value)
    assert suspend.is_suspended(builder.obj()) is expected


def test_suspend_deletes_pods_and_clears_start_time() -> None:
    job = (make_mpijob("pi", "ns").workers(2).suspend().status(start_time=at(0))
           .condition("Created").condition("Running", when=at(10)).obj())
    pods = [make_pod(job, "launcher").running().obj(), make_pod(job, "worker", 0).running().obj(),
            make_pod(job, "worker", 1).running().terminating().obj()]
    handled, plan = run(job, Observed(pods=pods))
    assert handled is True
    assert plan.status.start_time is None
    assert [podstate.name(p) for p in plan.pods_to_delete] == ["pi-launcher", "pi-worker-0"]
    suspended = plan.status.condition("Suspended")
    assert suspended is not None
    assert (suspended.status, suspended.reason, suspended.message) == (
        "True", "MPIJobSuspended", "MPIJob ns/pi is suspended.")
    assert suspended.last_transition_time == at(50)
    assert [f"{c.type}={c.status}" for c in plan.status.conditions] == [
        "Created=True", "Running=False", "Suspended=True"]
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "MPIJobSuspended")]


def test_suspended_again_emits_nothing_new() -> None:
    job = make_mpijob("pi").suspend().condition("Created").condition("Suspended", reason="MPIJobSuspended",
                                                                       message="MPIJob default/pi is suspended.")
    handled, plan = run(job.obj(), Observed())
    assert handled is True
    assert plan.events == []
    suspended = plan.status.condition("Suspended")
    assert suspended is not None
    assert suspended.last_transition_time == at(0)


def test_suspend_keeps_restart_count() -> None:
    job = make_mpijob("pi").suspend().status(restart_count=2).obj()
    _, plan = run(job, Observed())
    assert plan.status.restart_count == 2


def test_resume_sets_suspended_false() -> None:
    job = make_mpijob("pi", "ns").condition("Created").condition("Suspended").obj()
    handled, plan = run(job, Observed())
    assert handled is False
    suspended = plan.status.condition("Suspended")
    assert suspended is not None
    assert (suspended.status, suspended.reason, suspended.message) == (
        "False", "MPIJobResumed", "MPIJob ns/pi is resumed.")
    assert suspended.last_transition_time == at(50)
    assert plan.status.conditions[-1].type == "Created"
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "MPIJobResumed")]
    assert plan.pods_to_delete == []


def test_never_suspended_is_untouched() -> None:
    job = make_mpijob("pi").condition("Created").status(start_time=at(0)).obj()
    pods = [make_pod(job, "launcher").running().obj()]
    handled, plan = run(job, Observed(pods=pods))
    assert handled is False
    assert plan.status == job.status
    assert (plan.pods_to_delete, plan.events) == ([], [])
