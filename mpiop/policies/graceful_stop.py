"""Graceful stop: a planned end of an attempt that is not a rank's failure tells the ranks before killing them.

A suspend (Kueue's preemption, a user's), a disruption restart (a pod's DisruptionTarget) and activeDeadlineSeconds
used to delete every pod of the job in one go: hours of training since the last checkpoint were lost. With a stop
grace (annotation `mpiop.kubeflow.org/stop-grace-seconds`, else `--stop-grace-seconds`; 0, the default, keeps the
immediate deletion) the policy deciding the stop names its reason (`Plan.stop_reason`) and deletes the pods as
before; this step, run last, rewrites those deletions:

1. The attempt's running launcher is deleted first, with gracePeriodSeconds = the grace: the kubelet sends SIGTERM
   to its PID 1 (mpirun/mpiexec), which signals the ranks. The workers are not deleted yet, no pod is created, and
   the job gets the condition Stopping=True (reason: Suspended, Disrupted or DeadlineExceeded; the message names
   the deadline) and an Event Checkpointing. The status endpoint answers progress posts with the same news
   (`notice`), for ranks that no signal reaches.
2. Once the launcher has ended (its pod gone, or Succeeded/Failed) or the grace has passed, the workers go as the
   policies planned, Stopping turns False (LauncherEnded or GraceExpired, and how long it took) with an Event
   GracefulStop; metrics.count_transitions counts it.

The stop's start is Stopping's lastTransitionTime, so a restarted operator carries on where it was. The grace is
capped at the pods' terminationGracePeriodSeconds (the smallest of the templates', 30 when unset): the kubelet gives a
drained or shut-down node's pods no more than that, and Kueue expects a suspended job's pods gone within it; and at the
operator's --max-stop-grace-seconds, since a tenant writes both the annotation and its templates, and a preempted job
holds its quota and GPUs while it stops. A Warning names the setting and the cap. A cap rather than a refusal: a refusal
would fail a running job at its preemption, the worst time to. A failure restart (a rank already died) sets no stop
reason: not delayed.

A gang the scheduler preempted whole (or the Eviction API, or the taint manager, took every pod) leaves mpiop nothing
to order: every pod is going, each with its own grace, the launcher carrying DisruptionTarget. The stop is still
begun, as above, so the ranks are told (Stopping, Checkpointing, the notice) and the next attempt waits for the old
launcher; a launcher with no DisruptionTarget among pods all going was mpiop's own stop, told already.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Final

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import JobCondition, JobStatus, MPIJob, format_time
from mpiop.desired.settings import Settings
from mpiop.plan import Event, Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid

FLAG = "--stop-grace-seconds"
MAX_FLAG = "--max-stop-grace-seconds"
POD_CAP = "the pods' terminationGracePeriodSeconds (the kubelet kills them no later)"
OPERATOR_CAP = f"the operator's {MAX_FLAG}"
KUBELET_DEFAULT_GRACE = 30  # terminationGracePeriodSeconds when a template leaves it unset
STOPPING: Final = "Stopping"
SUSPENDED, DISRUPTED, DEADLINE_EXCEEDED = "Suspended", "Disrupted", "DeadlineExceeded"
REASONS = (SUSPENDED, DISRUPTED, DEADLINE_EXCEEDED)
LAUNCHER_ENDED, GRACE_EXPIRED = "LauncherEnded", "GraceExpired"
RESULTS = {LAUNCHER_ENDED: "launcher_ended", GRACE_EXPIRED: "grace_expired"}  # the metric's result label
CHECKPOINTING_EVENT, GRACEFUL_STOP_EVENT, CAPPED_EVENT = "Checkpointing", "GracefulStop", "StopGraceCapped"


@dataclass(frozen=True)
class Grace:
    """The seconds a stop waits for the launcher, where they were set, and what was asked if it was capped."""

    seconds: int
    source: str
    asked: int | None = None  # set only when more than the cap was asked
    cap: str = POD_CAP  # what capped it

    def note(self) -> str:
        if self.asked is None:
            return ""
        return f"{self.source}={self.asked} is capped at {self.seconds}, {self.cap}"


def annotation_seconds(job: MPIJob) -> int | None:
    """The annotation's whole seconds (>= 0); ValueError naming it when it is anything else."""
    value = job.metadata.annotations.get(names.STOP_GRACE_ANNOTATION)
    if value is None:
        return None
    if not value.strip().isdigit():
        raise ValueError(f"metadata.annotations[{names.STOP_GRACE_ANNOTATION}]: {value[:100]!r} is not a whole "
                         "number of seconds (0 or more)")
    return int(value)


def refuse_bad_annotation(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """A bad stop grace fails the job at once (STOP), naming the annotation: found at a preemption, it would be
    too late to say."""
    try:
        annotation_seconds(job)
    except ValueError as error:
        fail_invalid(plan, job.key, error, now)
        return STOP
    return CONTINUE


def termination_grace(job: MPIJob) -> int:
    """The smallest terminationGracePeriodSeconds of the job's pod templates (the kubelet's 30 where unset)."""
    found = [KUBELET_DEFAULT_GRACE if (v := (r.template.get("spec") or {}).get("terminationGracePeriodSeconds"))
             is None else int(v) for r in (job.spec.launcher, job.spec.worker) if r is not None]
    return min(found, default=KUBELET_DEFAULT_GRACE)


def grace(job: MPIJob, settings: Settings) -> Grace:
    """The job's stop grace (annotation, else the operator's flag), capped at termination_grace and at the
    operator's ceiling."""
    asked = annotation_seconds(job)
    source = f"annotation {names.STOP_GRACE_ANNOTATION}" if asked is not None else FLAG
    asked = settings.stop_grace_seconds if asked is None else asked
    seconds, cap = min((termination_grace(job), POD_CAP), (settings.max_stop_grace_seconds, OPERATOR_CAP))
    return Grace(seconds, source, asked, cap) if asked > seconds else Grace(asked, source)


def stopping(status: JobStatus) -> JobCondition | None:
    """The Stopping condition while a graceful stop is under way."""
    found = status.condition(STOPPING)
    return found if found is not None and found.status == "True" else None


def deadline(job: MPIJob, status: JobStatus, settings: Settings) -> dt.datetime | None:
    """When the stop under way (in `status`) deletes the workers whether or not the launcher ended."""
    found = stopping(status)
    if found is None or found.last_transition_time is None:
        return None
    try:
        return found.last_transition_time + dt.timedelta(seconds=grace(job, settings).seconds)
    except ValueError:
        return found.last_transition_time


def notice(job: MPIJob, settings: Settings) -> JSON | None:
    """What a progress post is told while the job is stopping: {"reason", "deadline"} (status_endpoint)."""
    found, until = stopping(job.status), deadline(job, job.status, settings)
    if found is None or until is None:
        return None
    return {"reason": found.reason, "deadline": format_time(until)}


def _live_launchers(observed: Observed) -> list[podstate.Pod]:
    """Launchers whose mpirun may still run: Running, going or not (an evicted one is given its own grace)."""
    return [p for s, p in zip(observed.states, observed.pods, strict=True)
            if s.role == names.LAUNCHER_ROLE and s.phase == "Running"]


def _hold(plan: Plan, launchers: list[podstate.Pod], seconds: int) -> None:
    """This pass deletes only launchers (the live ones with `seconds` of grace) and creates no pod."""
    plan.pods_to_delete = [p for p in plan.pods_to_delete if podstate.role(p) == names.LAUNCHER_ROLE]
    for pod in launchers:
        if not podstate.is_terminating(pod):
            plan.delete_pods([pod])
            plan.pod_grace_seconds[podstate.name(pod)] = seconds
    plan.creation_steps.drop_pods()
    plan.requeue_in(seconds)


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, settings: Settings) -> None:
    """Begin a graceful stop the plan asks for, or carry one on; run after every policy has planned its deletions."""
    under_way = stopping(plan.status)
    if under_way is not None:
        _carry_on(plan, job, observed, now, under_way, settings)
    elif plan.stop_reason is not None:
        _begin(plan, job, observed, now, plan.stop_reason, settings)


def _begin(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, reason: str, settings: Settings) -> None:
    planned = {podstate.name(p) for p in plan.pods_to_delete}
    launchers = [p for p in _live_launchers(observed) if podstate.is_terminating(p) or podstate.name(p) in planned]
    stop_grace = grace(job, settings)
    if stop_grace.seconds == 0 or not launchers:
        return  # nothing runs mpirun: nothing to tell
    capped = f"; {stop_grace.note()}" if stop_grace.asked is not None else ""
    if all(podstate.is_terminating(p) for p in observed.pods):
        preempted = _deleted_by_another(launchers)
        if preempted is None:
            return  # a stop ended (its grace passed) and deleted every pod: a launcher still going was told already
        message = _whole_gang_message(job, reason, preempted, stop_grace, capped)
    else:
        until = now + dt.timedelta(seconds=stop_grace.seconds)
        message = (f"MPIJob {job.key} is stopping gracefully ({reason}): launcher "
                   f"{', '.join(podstate.name(p) for p in launchers)} was sent SIGTERM; the workers are deleted once "
                   f"it has ended, or at {format_time(until)} (stop grace {stop_grace.seconds}s, {stop_grace.source}"
                   f"{capped})")
    _hold(plan, launchers, stop_grace.seconds)
    c.set_condition(plan.status, STOPPING, "True", reason, message, now)
    told = [Event("Normal", CHECKPOINTING_EVENT, message)]
    if stop_grace.asked is not None:
        told.append(Event("Warning", CAPPED_EVENT, f"MPIJob {job.key}: {stop_grace.note()}"))
    plan.events[:0] = told  # before the stop's own Suspended or Restarting


def _deleted_by_another(launchers: list[podstate.Pod]) -> tuple[podstate.Pod, str, str] | None:
    """A launcher that carries DisruptionTarget and is going: the scheduler (whole-gang preemption), the Eviction
    API or the taint manager deleted it, with every other pod of the job, not mpiop."""
    for pod in launchers:
        if podstate.is_terminating(pod) and (why := podstate.disruption(pod)) is not None:
            return pod, *why
    return None


def _whole_gang_message(job: MPIJob, stop: str, preempted: tuple[podstate.Pod, str, str], stop_grace: Grace,
                        capped: str) -> str:
    """What a stop says when every pod was deleted at once by another: nothing is left for mpiop to order, but the
    ranks are told (Stopping, the Checkpointing Event, the status endpoint's notice) and the next attempt waits."""
    pod, reason, message = preempted
    ends = pod["metadata"].get("deletionTimestamp", "")
    return (f"MPIJob {job.key} is stopping gracefully ({stop}): {reason} deleted launcher {podstate.name(pod)} "
            f"and every worker at once ({message[:podstate.DISRUPTION_MESSAGE_KEPT]}); the kubelet sends them SIGTERM "
            f"together and kills them at {ends} (their own grace); the next attempt waits for them, at most "
            f"{stop_grace.seconds}s (stop grace, {stop_grace.source}{capped})")


def _carry_on(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, under_way: JobCondition,
              settings: Settings) -> None:
    started = under_way.last_transition_time or now
    until = deadline(job, plan.status, settings) or now
    launchers = _live_launchers(observed)
    if launchers and now < until:
        _hold(plan, launchers, math.ceil((until - now).total_seconds()))
        return
    result = GRACE_EXPIRED if launchers else LAUNCHER_ENDED
    took = int((now - started).total_seconds())
    how = ("the grace passed before the launcher ended: its workers are deleted" if launchers
           else "the launcher ended before its workers were deleted")
    message = f"MPIJob {job.key} stopped gracefully ({under_way.reason}) in {took}s: {how}"
    c.set_condition(plan.status, STOPPING, "False", result, message, now)
    plan.event("Normal" if result == LAUNCHER_ENDED else "Warning", GRACEFUL_STOP_EVENT, message)
    if under_way.reason == SUSPENDED:  # resumed meanwhile, the suspend policy deletes nothing any more
        plan.delete_pods(observed.pods)
