"""A job with more workers than mpiop supports fails at once instead of being attempted.

The CRD refuses such jobs at admission; this covers one stored before that bound (or under an older CRD),
which would otherwise have the operator build, cache and hostfile millions of pods.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MAX_WORKER_REPLICAS, MPIJob
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status.failed import fail_invalid


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """Failed with ValidationError (STOP) when spec.mpiReplicaSpecs.Worker.replicas is over the maximum."""
    replicas = job.spec.worker_replicas
    if replicas <= MAX_WORKER_REPLICAS:
        return CONTINUE
    fail_invalid(plan, job.key, f"spec.mpiReplicaSpecs.Worker.replicas: {replicas} is more than the "
                 f"{MAX_WORKER_REPLICAS} workers mpiop supports", now)
    return STOP
