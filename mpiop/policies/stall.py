"""Stalls: a running job that reports no progress for longer than it declared fails the attempt, reason Stalled.

A hung collective (one rank stuck in an allreduce, an NCCL deadlock, a stuck filesystem) looks exactly like a
healthy job: every pod Running, nothing exits, every GPU held. A job that declares annotation
mpiop.kubeflow.org/progress-deadline-seconds (a positive integer, the name follows a Deployment's
progressDeadlineSeconds) promises to report progress (status.trainerStatus) at least that often. Once all its
ranks run (status.ranksRunningTime) the clock starts; each report (its lastUpdatedTime) restarts it, so a job
that never reports is caught too. A silent job is a failed attempt like a dead rank: every rank's log tail, the
launcher's and the last report are kept in `<job>-attempt-<n>` (policies/evidence), and it restarts by its
restart policy, or fails with reason Stalled past backoffLimit. Until then the job is woken at its deadline.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names
from mpiop.api.v2beta1 import MPIJob, format_time
from mpiop.plan import Observed, Plan
from mpiop.policies.failure import attempt_failed
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status import failure_report
from mpiop.status.failed import fail_invalid

MAX_DEADLINE = 2**31 - 1


def deadline_seconds(job: MPIJob) -> int | None:
    """The job's progress deadline, or None when it declares none; ValueError naming the annotation if bad."""
    value = job.metadata.annotations.get(names.PROGRESS_DEADLINE_ANNOTATION)
    if value is None:
        return None
    seconds = int(value) if value.strip().isdigit() else 0
    if not 1 <= seconds <= MAX_DEADLINE:
        raise ValueError(f"metadata.annotations[{names.PROGRESS_DEADLINE_ANNOTATION}]: {value[:100]!r} is not a "
                         f"whole number of seconds from 1 to {MAX_DEADLINE}")
    return seconds


def refuse_bad_annotation(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """A bad value of the progress annotations fails the job at once (STOP; a typo must not leave a hang
    unwatched, or a job unable to report), naming the annotation."""
    try:
        deadline_seconds(job)
        reports = job.metadata.annotations.get(names.REPORT_PROGRESS_ANNOTATION)
        if reports not in (None, "true", "false"):
            raise ValueError(f"metadata.annotations[{names.REPORT_PROGRESS_ANNOTATION}]: {reports[:100]!r} is not "
                             '"true" or "false"')
    except ValueError as error:
        fail_invalid(plan, job.key, error, now)
        return STOP
    return CONTINUE


def _silence(plan: Plan) -> tuple[dt.datetime, str] | None:
    """Since when the current attempt has been silent, and what it last said; None before all ranks run."""
    status = plan.status
    since = status.ranks_running_time
    if since is None or not status.is_true("Running"):
        return None
    report = status.trainer_status
    reported = report.last_updated_time if report is not None else None
    if report is None or reported is None:
        return since, f"it never reported progress (all ranks running since {format_time(since)})"
    said = f"it last reported at {format_time(reported)}: {report.summary()}"
    if reported < since:  # the report is the previous attempt's
        return since, f"this attempt never reported progress (all ranks running since {format_time(since)}; " \
                      f"the previous attempt last reported at {format_time(reported)}: {report.summary()})"
    return reported, said


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Fail a stalled attempt (STOP: the job restarts or has failed), else ask to be woken at its deadline."""
    deadline = deadline_seconds(job)  # refuse_bad_annotation ran first
    found = _silence(plan) if deadline is not None else None
    if deadline is None or found is None:
        return CONTINUE
    since, said = found
    silent = (now - since).total_seconds()
    if silent < deadline:
        plan.requeue_in(deadline - silent)
        return CONTINUE
    what = (f"no progress for {int(silent)}s (progress deadline {deadline}s, annotation "
            f"{names.PROGRESS_DEADLINE_ANNOTATION}); {said}")
    report = failure_report.summary_only(what, c.STALLED_REASON)
    attempt_failed(plan, job, observed, now, report, failed_reason=c.STALLED_REASON)
    return STOP
