"""Failed, the final condition: every policy that fails a job (backoffLimit, a deadline, a bad spec) marks it so."""

from __future__ import annotations

import datetime as dt

from mpiop.plan import MESSAGE_LIMIT, Plan
from mpiop.status import conditions as c


def mark_failed(plan: Plan, reason: str, message: str, now: dt.datetime, event_message: str | None = None) -> None:
    """Failed is final: completionTime is set and Running/Restarting go False."""
    status = plan.status
    if c.set_condition(status, "Failed", "True", reason, message, now):
        plan.event("Warning", reason, event_message or message)
    c.set_false_if_true(status, "Running", reason, message, now)
    c.set_false_if_true(status, "Restarting", reason, message, now)
    if status.completion_time is None:
        status.completion_time = now


def fail_invalid(plan: Plan, job_key: str, why: str | Exception, now: dt.datetime) -> None:
    """A spec or annotation that retrying cannot fix: the one wording, reason and cap for every validation."""
    mark_failed(plan, c.VALIDATION_ERROR_REASON, f"MPIJob {job_key} has failed: {why}"[:MESSAGE_LIMIT], now)
