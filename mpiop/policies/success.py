"""Success: the job has succeeded when the current attempt's launcher pod has (kubeflow's rule).

mpirun exits 0 only when every rank did, so the launcher's phase is the job's outcome; workers are not
waited for (they are cleaned up by cleanPodPolicy). Except when the attempt lost a wanted worker (Failed, deleted
by someone else, gone): Open MPI 5.0.7's prterun exits 0 after losing a worker's daemon, so that attempt is no
success and policies/failure fails it. A launcher being deleted decides nothing, as its failure does not
(policies/failure): it was replaced (its port moved, a suspend) and may have exited 0 on SIGTERM. Running
is not decided here: see status/lifecycle.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status import failure_report


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Mark the job Succeeded when the current attempt's launcher has (STOP)."""
    status = plan.status
    attempt = status.attempt
    launcher = observed.launcher(job, attempt)
    if launcher is None or podstate.attempt(launcher) != attempt or podstate.is_terminating(launcher):
        return CONTINUE
    if podstate.phase(launcher) != "Succeeded" or failure_report.lost_worker_report(job, observed, attempt):
        return CONTINUE
    mark_succeeded(plan, job, now)
    return STOP


def mark_succeeded(plan: Plan, job: MPIJob, now: dt.datetime) -> None:
    """Succeeded is final: completionTime is set and Running/Restarting go False."""
    status = plan.status
    message = f"MPIJob {job.key} successfully completed."
    if c.set_condition(status, "Succeeded", "True", c.SUCCEEDED_REASON, message, now):
        plan.event("Normal", c.SUCCEEDED_REASON, message)
    c.set_false_if_true(status, "Running", c.SUCCEEDED_REASON, message, now)
    c.set_false_if_true(status, "Restarting", c.SUCCEEDED_REASON, message, now)
    if status.completion_time is None:
        status.completion_time = now
