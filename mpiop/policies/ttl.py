"""ttlSecondsAfterFinished: the MPIJob itself is deleted that long after it finished."""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, Outcome


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    finished_at = plan.status.completion_time
    if ttl is None or finished_at is None or not plan.status.finished:
        return CONTINUE
    remaining = ttl - (now - finished_at).total_seconds()
    if remaining <= 0:
        plan.delete_mpijob = True
    else:
        plan.requeue_in(remaining)
    return CONTINUE
