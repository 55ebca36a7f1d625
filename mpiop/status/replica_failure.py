"""ReplicaFailure, as a ReplicaSet sets it: True (with the apiserver's reason) while an object cannot be created.

A refusal that may heal (a ServiceAccount created a minute later, a squatter deleted) is retried, ever less
often: the wait is the time since the condition became True, between 1 s and a minute, so it doubles.
"""

from __future__ import annotations

import datetime as dt

from mpiop.plan import Plan
from mpiop.status import conditions as c

MIN_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0


def report(plan: Plan, reason: str, message: str, now: dt.datetime) -> None:
    """Set ReplicaFailure True (a Warning Event when it becomes so, or its reason changes) and retry later."""
    status = plan.status
    before = status.condition("ReplicaFailure")
    became_true = c.set_condition(status, "ReplicaFailure", "True", reason, message, now)
    if became_true or (before is not None and before.reason != reason):
        plan.event("Warning", reason, message)
    since = status.condition("ReplicaFailure")
    assert since is not None and since.last_transition_time is not None
    elapsed = (now - since.last_transition_time).total_seconds()
    plan.requeue_in(min(max(elapsed, MIN_RETRY_SECONDS), MAX_RETRY_SECONDS))


def clear(plan: Plan, job_key: str, now: dt.datetime) -> None:
    """Every object the last pass tried was created: ReplicaFailure goes False (if it was True)."""
    message = f"MPIJob {job_key}: every object it asked for was created."
    c.set_false_if_true(plan.status, "ReplicaFailure", c.CREATED_OBJECTS_REASON, message, now)
