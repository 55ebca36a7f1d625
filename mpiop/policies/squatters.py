"""Squatters, objects with names the job needs that it does not control (no controller reference to its uid):
reported, never used.

A tenant may create `<job>-ssh`, `<job>-config`, Service `<job>` or a pod `<job>-worker-0` before the job:
creating ours then answers AlreadyExists. Such an object is someone else's (whoever made it: an object whose
controller reference carries this job's uid, such as one kubeflow's controller made for it, is the job's
own and is seen in the caches instead). The job shows ReplicaFailure, reason ErrResourceExists (kubeflow's
event reason), names the objects, and does not start: the reconciler creates no pod while a Secret,
ConfigMap or Service is taken and no launcher while a worker is. Creation is retried, so deleting the
squatter lets the job go on.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from mpiop.policies.outcome import CONTINUE, Outcome
from mpiop.status import conditions as c
from mpiop.status import replica_failure


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Report names taken by objects the job does not control, or clear the ReplicaFailure once nothing was
    refused. Always CONTINUE: a job with squatters still gets its other objects planned (the reconciler holds
    back what the taken names block)."""
    taken = [r for r in observed.refused if r.name_taken]
    if not taken:
        if not observed.refused:
            replica_failure.clear(plan, job.key, now)
        return CONTINUE
    listed = ", ".join(f"{r.kind} {r.name}" for r in taken[:5])
    if len(taken) > 5:
        listed += f" and {len(taken) - 5} more"
    message = (f"MPIJob {job.key} does not start: names it needs are taken by objects it does not control "
               f"(no controller ownerReference to its uid {job.metadata.uid}): {listed}; delete or rename them")
    replica_failure.report(plan, c.RESOURCE_EXISTS_REASON, message[:MESSAGE_LIMIT], now)
    return CONTINUE
