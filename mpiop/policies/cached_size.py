"""An MPIJob over --max-mpijob-kib fails at once: the cache keeps only what failing it needs (controller/trims.py).

The MPIJob cache keeps every job whole, and its templates preserve unknown fields: a tenant's job may be as large as
etcd takes (1.5 MiB), and as many as its quota allows. Over the bound, the cached job is cut to its identity, replica
counts, runPolicy and status, with CUT_ANNOTATION saying how large it was; this policy fails it with ValidationError
naming the bound and its flag (its pods, if any, go as its cleanPodPolicy says). Nothing is decided from the cut
spec.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status.failed import fail_invalid

# Set on the cached copy only (never written): the bytes of JSON of the job, when over the bound. The trim removes
# one its tenant wrote.
CUT_ANNOTATION = "mpiop.kubeflow.org/cached-job-bytes"


def apply(plan: Plan, job: MPIJob, now: dt.datetime, max_kib: int) -> Outcome:
    """Failed with ValidationError (STOP) when the cache cut the job (CUT_ANNOTATION)."""
    size = job.metadata.annotations.get(CUT_ANNOTATION)
    if size is None:
        return CONTINUE
    fail_invalid(plan, job.key, f"it is {size} bytes of JSON (managedFields and kubectl's last-applied-configuration "
                 f"aside), more than the {max_kib} KiB mpiop takes of an MPIJob (--max-mpijob-kib)", now)
    return STOP
