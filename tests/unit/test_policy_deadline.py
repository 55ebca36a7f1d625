"""mpiop.policies.deadline: activeDeadlineSeconds counted from startTime."""

from __future__ import annotations

import pytest

from mpiop.plan import Plan
from mpiop.policies import deadline
from mpiop.policies.outcome import STOP
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob


@pytest.mark.parametrize(
    ("job", "now", "exceeded", "requeue_after"),
    [
        (make_mpijob("pi").status(start_time=at(0)), 10_000, False, None),
        (make_mpijob("pi").deadline(60), 10_000, False, None),
        (make_mpijob("pi").deadline(60).status(start_time=at(0)), 0, False, 60.0),
        (make_mpijob("pi").deadline(60).status(start_time=at(0)), 59.5, False, 0.5),
        (make_mpijob("pi").deadline(60).status(start_time=at(0)), 60, True, None),
        (make_mpijob("pi").deadline(60).status(start_time=at(0)), 61, True, None),
        (make_mpijob("pi").deadline(0).status(start_time=at(0)), 0, True, None),
    ],
    ids=["no-deadline", "not-started", "at-start", "just-before", "exactly-at", "after", "zero"],
)
def test_deadline(job: MPIJobBuilder, now: float, exceeded: bool, requeue_after: float | None) -> None:
    obj = job.obj()
    plan = Plan(status=obj.status.model_copy(deep=True))
    assert (deadline.apply(plan, obj, at(now)) is STOP) is exceeded
    assert plan.requeue_after == requeue_after
    assert plan.status.is_true("Failed") is exceeded
    if exceeded:
        failed = plan.status.condition("Failed")
        assert failed is not None
        assert failed.reason == "DeadlineExceeded"
        assert failed.message == (f"MPIJob default/pi has failed: it ran longer than "
                                  f"activeDeadlineSeconds={obj.spec.run_policy.active_deadline_seconds}")
        assert plan.status.completion_time == at(now)
        assert [(e.type, e.reason) for e in plan.events] == [("Warning", "DeadlineExceeded")]


def test_deadline_keeps_the_earlier_requeue() -> None:
    job = make_mpijob("pi").deadline(600).status(start_time=at(0)).obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    plan.requeue_in(30)
    deadline.apply(plan, job, at(100))
    assert plan.requeue_after == 30
    plan.requeue_after = None
    deadline.apply(plan, job, at(100))
    assert plan.requeue_after == 500


def test_deadline_ends_running() -> None:
    job = make_mpijob("pi").deadline(10).status(start_time=at(0)).condition("Created").condition("Running").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    deadline.apply(plan, job, at(11))
    assert [f"{c.type}={c.status}" for c in plan.status.conditions] == ["Created=True", "Running=False",
                                                                            "Failed=True"]
