"""mpiop.policies.squatters: a name taken by an object the job does not control is reported, never used."""

from __future__ import annotations

import pytest

from mpiop.decide import decide
from mpiop.plan import Observed, Plan, Refusal
from mpiop.policies import squatters
from mpiop.policies.outcome import CONTINUE
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod, observe


def _taken(kind: str, name: str) -> Refusal:
    return Refusal(kind, name, 409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')


def test_taken_names_are_reported_with_the_jobs_uid() -> None:
    job = make_mpijob("sq", "ns").uid("u-1").condition("Created").obj()
    observed = Observed(refused=[_taken("Secret", "sq-ssh"), _taken("ConfigMap", "sq-config")])
    plan = Plan(status=job.status.model_copy(deep=True))
    assert squatters.apply(plan, job, observed, at(0)) is CONTINUE
    condition = plan.status.condition("ReplicaFailure")
    assert condition is not None and (condition.status, condition.reason) == ("True", "ErrResourceExists")
    assert condition.message == (
        "MPIJob ns/sq does not start: names it needs are taken by objects it does not control (no controller "
        "ownerReference to its uid u-1): Secret sq-ssh, ConfigMap sq-config; delete or rename them")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "ErrResourceExists")]
    assert plan.requeue_after == 1.0


def test_many_taken_names_are_summed_up() -> None:
    job = make_mpijob("sq").obj()
    observed = Observed(refused=[_taken("Pod", f"sq-worker-{i}") for i in range(8)])
    plan = Plan(status=job.status.model_copy(deep=True))
    squatters.apply(plan, job, observed, at(0))
    condition = plan.status.condition("ReplicaFailure")
    assert condition is not None and condition.message is not None
    assert "Pod sq-worker-4 and 3 more;" in condition.message


def test_nothing_taken_nothing_reported() -> None:
    job = make_mpijob("sq").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    assert squatters.apply(plan, job, Observed(), at(0)) is CONTINUE
    assert plan.status.conditions == []


def test_decide_clears_the_condition_once_every_creation_succeeded() -> None:
    job = make_mpijob("sq").workers(1).obj()
    first = decide(job, Observed(refused=[_taken("Pod", "sq-worker-0")]), at(0))
    assert first.status.is_true("ReplicaFailure")
    job = job.model_copy(update={"status": first.status})
    pods = [make_pod(job, "worker", 0).obj(), make_pod(job, "launcher").obj()]
    healed = decide(job, observe(job, pods), at(3))
    condition = healed.status.condition("ReplicaFailure")
    assert condition is not None and (condition.status, condition.reason) == ("False", "ObjectsCreated")
    assert healed.status.conditions[-1].type == "Created"


@pytest.mark.parametrize(
    ("refused", "cleared"),
    [([], True), ([_taken("Secret", "sq-ssh")], False),
     ([Refusal("Pod", "sq-launcher", 422, "Invalid", "bad")], False)],
    ids=["nothing-refused", "still-taken", "other-refusal"],
)
def test_replica_failure_clears_only_once_nothing_is_refused(refused: list[Refusal], cleared: bool) -> None:
    job = make_mpijob("sq", "ns").condition("ReplicaFailure", reason="ErrResourceExists").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    assert squatters.apply(plan, job, Observed(refused=refused), at(0)) is CONTINUE
    assert plan.status.is_true("ReplicaFailure") is not cleared
