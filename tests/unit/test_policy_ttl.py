"""mpiop.policies.ttl: ttlSecondsAfterFinished deletes the MPIJob itself."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import ConditionType
from mpiop.plan import Plan
from mpiop.policies import ttl
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob


def finished(kind: ConditionType = "Succeeded", ttl_seconds: int = 100) -> MPIJobBuilder:
    """Finished (Succeeded or Failed) at T0, with a TTL."""
    return make_mpijob("pi").ttl(ttl_seconds).condition("Created").condition(kind).status(completion_time=at(0))


@pytest.mark.parametrize(
    ("job", "now", "delete_mpijob", "requeue_after"),
    [
        (make_mpijob("pi").condition("Succeeded").status(completion_time=at(0)), 10_000, False, None),
        (make_mpijob("pi").ttl(100).condition("Running"), 10_000, False, None),
        (make_mpijob("pi").ttl(100).condition("Succeeded"), 10_000, False, None),
        (make_mpijob("pi").ttl(100).condition("Succeeded", "False").status(completion_time=at(0)), 500, False,
         None),
        (finished(), 0, False, 100.0),
        (finished(), 99, False, 1.0),
        (finished(), 100, True, None),
        (finished(), 500, True, None),
        (finished("Failed"), 40, False, 60.0),
        (finished("Failed"), 100, True, None),
        (finished(ttl_seconds=0), 0, True, None),
    ],
    ids=["no-ttl", "not-finished", "no-completion-time", "succeeded-false", "just-finished", "just-before",
         "exactly-at", "after", "failed-before", "failed-after", "zero-ttl"],
)
def test_ttl(job: MPIJobBuilder, now: float, delete_mpijob: bool, requeue_after: float | None) -> None:
    obj = job.obj()
    plan = Plan(status=obj.status.model_copy(deep=True))
    ttl.apply(plan, obj, at(now))
    assert plan.delete_mpijob is delete_mpijob
    assert plan.requeue_after == requeue_after
