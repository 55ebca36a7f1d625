"""Objects the apiserver refuses (e.g. a pod template schema and CEL could not catch) fail the job once.

Retrying an invalid object only repeats the refusal, so the job goes Failed with reason ValidationError
and the apiserver's message, and no retry storm follows.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Plan
from mpiop.policies.failure import mark_failed
from mpiop.status import conditions as c


def apply(plan: Plan, job: MPIJob, kind: str, name: str, message: str, now: dt.datetime) -> None:
    text = f"MPIJob {job.key} has failed: the apiserver refused {kind} {name}: {message}"
    mark_failed(plan, c.VALIDATION_ERROR_REASON, text[:1024], now)
