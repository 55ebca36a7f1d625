"""Failure and backoffLimit: a failed pod restarts the whole job, until the failures exceed backoffLimit.

An MPI job cannot lose a rank and go on, so any Failed launcher or worker pod (an error exit, OOMKilled,
evicted) of the current attempt fails the attempt: the attempt counter in status goes up and every pod is
deleted and made again. Pods carry their attempt as a label, so one failure is counted once, even if the failed
pod is still seen by a later reconcile. A pod already being deleted (by a restart, a scale-down or a suspend,
which can kill it into Failed on its way out) is not a failure; a wanted worker deleted by someone else while
the launcher ran is, even if mpirun then exits 0 (status.failure_report). With restartPolicy ExitCode, exit
codes 1-127 are permanent (the program itself failed) and fail the job at once; 128-255 (killed by a signal)
restart it. The messages (and status.lastFailure) come from status.failure_report: the pod to blame, its ranks
and node, and the log tail, and name the ConfigMap the attempt's logs are saved in (policies/evidence). A failed
launcher is kept through the next attempt (its successor has its own name), so its log survives the restart.

A container under restartPolicy OnFailure is restarted in place by the kubelet and its pod never fails: each
such failed run counts against backoffLimit too (status.in_place), as a Kubernetes Job counts them for
kubeflow's launcher. Within the limit nothing is restarted (mpirun runs again against the same workers); past
it the job fails with BackoffLimitExceeded, told from the restarted container's previous run. What counts, and
when a job is past its limit, is status.backoff's to say.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import backoff, failure_report, in_place, lifecycle, milestones
from mpiop.status import conditions as c
from mpiop.status.failed import mark_failed


def _is_permanent(job: MPIJob, pod: podstate.Pod) -> bool:
    replica = job.spec.launcher if podstate.role(pod) == names.LAUNCHER_ROLE else job.spec.worker
    if replica is None or replica.restart_policy != "ExitCode":
        return False
    code = podstate.exit_code(pod)
    return code is not None and 1 <= code <= 127


def first_failure(job: MPIJob, observed: Observed, attempt: int) -> podstate.Pod | None:
    """The launcher's failure first (it carries mpirun's exit code), then the lowest worker's."""
    failed = failure_report.failed_pods(observed, attempt)
    return failed[0] if failed else None


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Handle a failed attempt; STOP when it did (the job is restarting or has failed)."""
    attempt = plan.status.attempt
    if (lost := failure_report.lost_worker_report(job, observed, attempt)) is not None:
        attempt_failed(plan, job, observed, now, lost)  # mpirun exited 0 though a worker was lost
        return STOP
    pod = first_failure(job, observed, attempt)
    standing = backoff.count(job, observed)
    if pod is None and not standing.past_limit:
        restarted_in_place(plan, job, observed, now)
        return CONTINUE
    found = failure_report.report(job, observed, attempt)
    assert found is not None  # it blames the Failed pod, else the containers restarted in place past the limit
    if pod is None:  # no Failed pod: containers restarted in place took the job past backoffLimit
        plan.status.last_failure = found.info.model_copy(update={"time": now, "attempt": attempt})
        head = (f"MPIJob {job.key} has failed (backoffLimit {standing.limit} exceeded: "
                f"{standing.failures} failures after {attempt} restarts, "
                f"{standing.in_place} of them restarted in place)")
        saved = saved_in(job, attempt)
        mark_failed(plan, c.BACKOFF_LIMIT_EXCEEDED_REASON, found.message(head, saved), now,
                    event_message=found.message(head, saved, limit=MESSAGE_LIMIT))
        return STOP
    attempt_failed(plan, job, observed, now, found, _is_permanent(job, pod))
    return STOP


def saved_in(job: MPIJob, attempt: int) -> str:
    """What the messages of a failed attempt add: where policies/evidence saves its logs."""
    return f"; the attempt's logs are kept in ConfigMap {names.attempt_config_map_name(job, attempt)}"


def restarted_in_place(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    """Containers restarted in place, within backoffLimit: the Running condition (Restarting, before the job
    runs) counts them against the limit, and each new failure gets a Warning Event, so `kubectl describe`
    explains a launcher in CrashLoopBackOff. The workers are left running: the kubelet re-runs mpirun."""
    status = plan.status
    note = in_place.note(job, observed)
    if not note:
        return
    # One Event per failure counted: the count is already in a condition once told (the pods' words may change).
    if not any(f"; {backoff.count(job, observed)}" in (cond.message or "") for cond in status.conditions):
        plan.event("Warning", c.CONTAINER_RESTARTED_REASON, f"MPIJob {job.key}: {note}")
    if status.is_true("Running"):
        c.set_condition(status, "Running", "True", c.RUNNING_REASON, lifecycle.running_message(job, observed), now)
    else:
        c.set_condition(status, "Restarting", "True", c.CONTAINER_RESTARTED_REASON,
                        f"MPIJob {job.key} is restarting in place: {note}", now)


def attempt_failed(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime,
                   why: failure_report.Report | str, permanent: bool = False, disrupted: bool = False,
                   failed_reason: str = c.FAILED_REASON) -> None:
    """The current attempt failed: restart the job, or fail it at backoffLimit (with `failed_reason`). `why` is
    the failure report, or a summary where no pod is to blame (an adopted job's launcher Job that failed). A
    `disrupted` attempt (policies/disruption) restarts without spending backoffLimit."""
    found = why if isinstance(why, failure_report.Report) else failure_report.summary_only(why)
    status = plan.status
    attempt = status.attempt
    status.last_failure = found.info.model_copy(update={"time": now, "attempt": attempt})
    counted = backoff.count(job, observed, backoff.Ending.DISRUPTED if disrupted else backoff.Ending.FAILED)
    limit, restarted, disruptions = counted.limit, counted.in_place, counted.disruptions
    key = job.key
    saved = saved_in(job, attempt)
    if (permanent and not disrupted) or counted.past_limit:
        reached = "permanent exit code (restartPolicy ExitCode)" if permanent else f"backoffLimit {limit}"
        head = f"MPIJob {key} has failed ({reached} reached after {attempt} restarts)"
        mark_failed(plan, failed_reason, found.message(head, saved), now,
                    event_message=found.message(head, saved, limit=MESSAGE_LIMIT))
        return
    milestones.new_attempt(status)
    status.restart_count = attempt + 1
    status.disruption_restarts = disruptions or None
    status.attempt_start_time = now
    kept = [p for p in observed.pods if podstate.is_kept_launcher(p, attempt + 1)]
    middle = (f"; the failed launcher {podstate.name(kept[0])} is kept for `kubectl logs`" if kept else "") + saved
    in_place_part = f" with {restarted} restarted in place" if restarted else ""
    told = f", failure {counted.failures}{in_place_part}" if restarted or disruptions else ""
    head = f"MPIJob {key} is restarting (restart {attempt + 1}{told} of backoffLimit {limit})"
    if disrupted:
        head = (f"MPIJob {key} is restarting after a disruption (restart {attempt + 1}, disruption {disruptions}; "
                f"not counted against backoffLimit {limit})")
    message = found.message(head, middle)
    c.set_condition(status, "Restarting", "True", c.RESTARTING_REASON, message, now)
    c.set_false_if_true(status, "Running", c.RESTARTING_REASON, message, now)
    plan.event("Warning", c.RESTARTING_REASON, found.message(head, middle, MESSAGE_LIMIT))
    plan.delete_pods([p for p in observed.pods if p not in kept])
