"""mpiop.status.failed: Failed is final: completionTime set once, Running/Restarting False, one Event."""

from __future__ import annotations

from mpiop.plan import MESSAGE_LIMIT, Plan
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid, mark_failed
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


def test_fail_invalid_words_and_caps_every_validation() -> None:
    job = make_mpijob("big").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    fail_invalid(plan, job.key, ValueError("x" * 5000), at(0))
    failed = next(cond for cond in plan.status.conditions if cond.type == "Failed")
    assert failed.reason == c.VALIDATION_ERROR_REASON
    assert failed.message is not None and len(failed.message) == MESSAGE_LIMIT
    assert failed.message.startswith(f"MPIJob {job.key} has failed: xxx")
