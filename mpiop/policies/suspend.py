"""suspend: a suspended job has no pods; resuming makes them again from the current templates.

Kueue suspends jobs while they queue and edits their templates (node selectors, tolerations) before it
resumes them, so pods are always built anew on resume. The ConfigMap, Secret and Service stay.
startTime is cleared, so activeDeadlineSeconds counts from the resume. The pods go gracefully under a stop grace
(policies/graceful_stop). A job resumed before its suspended attempt's pods are all gone waits for them (STOP): the
new pods have the same names and attempt, and would join an attempt still on its way out.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import graceful_stop
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c


def is_suspended(job: MPIJob) -> bool:
    return bool(job.spec.run_policy.suspend)


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Suspend (STOP: nothing else to do this pass) or note a resume (CONTINUE)."""
    status = plan.status
    if is_suspended(job):
        message = f"MPIJob {job.key} is suspended."
        if c.set_condition(status, "Suspended", "True", c.SUSPENDED_REASON, message, now):
            plan.event("Normal", c.SUSPENDED_REASON, message)
        c.set_false_if_true(status, "Running", c.SUSPENDED_REASON, message, now)
        status.start_time = None
        plan.delete_pods(observed.pods)
        plan.stop_reason = graceful_stop.SUSPENDED
        return STOP
    if status.is_true("Suspended"):
        message = f"MPIJob {job.key} is resumed."
        c.set_condition(status, "Suspended", "False", c.RESUMED_REASON, message, now)
        plan.event("Normal", c.RESUMED_REASON, message)
    if resuming(job, plan) and observed.pods:
        return STOP  # their deletions (or the graceful stop's) are under way: each one's watch event wakes the job
    return CONTINUE


def resuming(job: MPIJob, plan: Plan) -> bool:
    """Resumed, and not started again yet (startTime is cleared at a suspend and set at the first pass after)."""
    suspended = plan.status.condition("Suspended")
    return not is_suspended(job) and suspended is not None and plan.status.start_time is None
