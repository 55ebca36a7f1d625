"""mpiop.policies.success: the job succeeds when the current attempt's launcher does."""

from __future__ import annotations

from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import success
from testkit.builders import at, make_mpijob, make_pod


def plan_for(job: MPIJob) -> Plan:
    return Plan(status=job.status.model_copy(deep=True))


def true_conditions(status: JobStatus) -> list[str]:
    return [c.type for c in status.conditions if c.status == "True"]


def test_succeeded_sets_completion_time_and_ends_running() -> None:
    job = make_mpijob("pi", "ns").workers(1).condition("Created").condition("Running").obj()
    observed = Observed(pods=[make_pod(job, "launcher").succeeded().obj(),
                              make_pod(job, "worker", 0).running().obj()])
    plan = plan_for(job)
    assert success.apply(plan, job, observed, at(60)) is True
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
    assert success.apply(again, job, observed, at(90)) is True
    assert again.status.completion_time == at(60)
    assert again.events == []


def test_succeeded_launcher_of_old_attempt_is_ignored() -> None:
    job = make_mpijob("pi").workers(1).status(restart_count=1).obj()
    plan = plan_for(job)
    assert success.apply(plan, job, Observed(pods=[make_pod(job, "launcher", attempt=0).succeeded().obj()]),
                          at(1)) is False
    assert plan.status.completion_time is None
    assert not plan.status.is_true("Succeeded")
