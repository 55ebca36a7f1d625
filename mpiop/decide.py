"""One reconcile's decisions, as a pure function of (job, observed objects, now): the design in one page.

    finished?    -> TTL, clean-up, counts; nothing else
    (always)     -> SSH Secret, Service, hostfile ConfigMap
    suspended?   -> pods deleted, Suspended
    deadline?    -> Failed DeadlineExceeded, clean-up
    pod failed?  -> Restarting (pods deleted) or Failed (backoffLimit), clean-up
    launcher ok? -> Succeeded, clean-up
    otherwise    -> create what is missing, update the hostfile, Running when all pods run
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ensure
from mpiop.plan import Observed, Plan
from mpiop.policies import cleanup, deadline, failure, suspend, ttl
from mpiop.status import progress


def decide(job: MPIJob, observed: Observed, now: dt.datetime, cluster_domain: str = "") -> Plan:
    plan = Plan(status=job.status.model_copy(deep=True))
    progress.mark_created(plan, job, now)
    _decide(plan, job, observed, now, cluster_domain)
    if plan.status.finished:
        cleanup.apply(plan, job, observed)
        ttl.apply(plan, job, now)
    plan.status.replica_statuses = progress.replica_statuses(job, observed)
    return plan


def _decide(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, cluster_domain: str) -> None:
    if plan.status.finished:
        return
    ensure.supporting_objects(plan, job, observed, cluster_domain)
    if suspend.apply(plan, job, observed, now):
        return
    if plan.status.start_time is None:
        plan.status.start_time = now
    if deadline.apply(plan, job, now):
        return
    if progress.apply(plan, job, observed, now):
        return
    if failure.apply(plan, job, observed, now):
        return
    ensure.job_pods(plan, job, observed, cluster_domain)
