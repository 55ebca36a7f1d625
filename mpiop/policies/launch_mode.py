"""A launch annotation mpiop does not know, or an exec launcher template that cannot run as the job's launcher
account, fails the job before any object is made, naming the annotation or field.

Guessing a mode would start the job in one the user did not ask for (SSH where the image has no sshd, or
exec where the namespace forbids it); retrying cannot help.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launch
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status.failed import fail_invalid


def apply(plan: Plan, job: MPIJob, now: dt.datetime, default: launch.LaunchMode = launch.DEFAULT_LAUNCH) -> Outcome:
    """Failed with ValidationError (STOP) when the launch annotation's value is neither ssh nor exec, or an exec
    launcher's template names its own ServiceAccount or turns its token off (desired.launch)."""
    error = launch.annotation_error(job) or launch.exec_template_error(job, default)
    if error is None:
        return CONTINUE
    fail_invalid(plan, job.key, error, now)
    return STOP
