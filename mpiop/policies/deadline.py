"""activeDeadlineSeconds: a job that runs too long (counted from startTime) fails with DeadlineExceeded.

Its pods go as cleanPodPolicy says, gracefully under a stop grace (policies/graceful_stop).
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Plan
from mpiop.policies import graceful_stop
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import mark_failed


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """Fail the job if its deadline has passed (STOP), else ask to be woken up when it will."""
    deadline = job.spec.run_policy.active_deadline_seconds
    start = plan.status.start_time
    if deadline is None or start is None:
        return CONTINUE
    remaining = deadline - (now - start).total_seconds()
    if remaining > 0:
        plan.requeue_in(remaining)
        return CONTINUE
    message = f"MPIJob {job.key} has failed: it ran longer than activeDeadlineSeconds={deadline}"
    mark_failed(plan, c.DEADLINE_EXCEEDED_REASON, message, now)
    plan.stop_reason = graceful_stop.DEADLINE_EXCEEDED  # the clean-up's deletions go gracefully
    return STOP
