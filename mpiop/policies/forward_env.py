"""A forward-env annotation mpirun could not use fails the job before any pod is made, naming the entries.

Open MPI stops at the first bad name of its forwarding list, so running the job would only fail later and
less clearly; retrying cannot help.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import env
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status.failed import fail_invalid


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    bad = env.forward_env_errors(job)
    if not bad:
        return CONTINUE
    entries = ", ".join(repr(e) for e in bad)
    fail_invalid(plan, job.key, f"metadata.annotations[{names.FORWARD_ENV_ANNOTATION}]: {entries} is not an "
                 "environment variable name or NAME_PREFIX*", now)
    return STOP
