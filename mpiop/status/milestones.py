"""Milestones of the current attempt a user sees in `kubectl get -o wide` and describe: when every pod was
scheduled, when all ranks ran, when the job first reported progress (the job's creation is its metadata's).

Each is set once, the first pass that sees it, and cleared when a new attempt starts (a restart or a resume),
so the times always tell the attempt that runs now; the progress deadline (policies/stall) counts from them.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.plan import Observed, Plan


def new_attempt(status: JobStatus) -> None:
    """A new attempt starts: its milestones are still ahead."""
    status.scheduled_time = status.ranks_running_time = status.first_progress_time = None


def _all_scheduled(job: MPIJob, observed: Observed, attempt: int) -> bool:
    launcher = observed.launcher(job, attempt)
    if job.spec.launcher is not None and (launcher is None or podstate.node_name(launcher) is None):
        return False
    workers = observed.workers(job, attempt)
    return all(i in workers and podstate.node_name(workers[i]) is not None for i in range(job.spec.worker_replicas))


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    status = plan.status
    attempt = status.attempt
    if status.scheduled_time is None and _all_scheduled(job, observed, attempt):
        status.scheduled_time = now
    if status.ranks_running_time is None and status.is_true("Running"):
        status.ranks_running_time = now
    reported = status.trainer_status.last_updated_time if status.trainer_status is not None else None
    started = status.attempt_start_time or status.start_time
    if status.first_progress_time is None and status.ranks_running_time is not None and reported is not None \
            and (started is None or reported >= started):
        status.first_progress_time = now
