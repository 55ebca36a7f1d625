"""mpiop.status.failed: Failed is final: completionTime set once, Running/Restarting False, one Event."""

from __future__ import annotations

from mpiop.plan import Plan
from mpiop.status import conditions as c
from mpiop.status.failed import mark_failed
from testkit.mpijobs import at, make_mpijob


def test_failed_is_final_and_told_once() -> None:
    job = make_mpijob("pi").condition("Created", when=at(0)).condition("Running", when=at(1)).obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    mark_failed(plan, c.BACKOFF_LIMIT_EXCEEDED_REASON, "MPIJob ns/pi has failed", at(5), event_message="short")
    assert [(x.type, x.status) for x in plan.status.conditions] == [
        ("Created", "True"), ("Running", "False"), ("Failed", "True")]
    assert plan.status.completion_time == at(5)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", c.BACKOFF_LIMIT_EXCEEDED_REASON, "short")]
    mark_failed(plan, c.BACKOFF_LIMIT_EXCEEDED_REASON, "MPIJob ns/pi has failed", at(9))
    assert plan.status.completion_time == at(5), "completionTime is the first failure's"
    assert len(plan.events) == 1, "no second Event for the same Failed condition"
