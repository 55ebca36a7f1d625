"""A launch annotation mpiop does not know fails the job before any object is made, naming the annotation.

Guessing a mode would start the job in one the user did not ask for (SSH where the image has no sshd, or
exec where the namespace forbids it); retrying cannot help.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launch
from mpiop.plan import Plan
from mpiop.policies.failure import mark_failed
from mpiop.status import conditions as c


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> bool:
    """Failed with ValidationError (True) when the launch annotation's value is neither ssh nor exec."""
    error = launch.annotation_error(job)
    if error is None:
        return False
    mark_failed(plan, c.VALIDATION_ERROR_REASON, f"MPIJob {job.key} has failed: {error}"[:1024], now)
    return True
