"""Disruptions: a pod evicted, preempted or deleted off a failing node restarts the job without spending backoffLimit.

What ended such a pod was outside it, so it says nothing about the program: as a Kubernetes Job's
podFailurePolicy `Ignore` on the DisruptionTarget condition, the restart is counted apart
(status.disruptionRestarts), not against backoffLimit. The condition is put on the pod before it goes (the
Eviction API, the scheduler's preemption, the taint manager, the pod GC) or as the kubelet ends it (node
pressure, node shutdown); a pod that is already being deleted counts too, since an evicted pod is deleted, not
failed, and without this the worker would come back alone into a job whose mpirun lost it (kubeflow #647).
A condition on a pod that neither goes nor failed is not acted on (an eviction that was then not carried out;
Kubernetes clears it). A disrupted pod gone before a pass saw it going counts too (Observed.disrupted_gone: the
scheduler preempts a gang by deleting each pod right after its condition, and an unbound or simulated pod goes at
once): taken for never made, it would be made again into the same attempt, and under Kubernetes' gangs into the
attempt's PodGroup, placed for good, while the job still said Running. Past --max-disruption-restarts a disruption
counts as an ordinary failure, so a job that is preempted again and again still ends. The attempt's pods go
gracefully under a stop grace (policies/graceful_stop): the launcher is told first, so the ranks left can checkpoint.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names, podsnapshot, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import failure, graceful_stop
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import failure_report


def disrupted_pod(observed: Observed, attempt: int) -> tuple[podstate.Pod, str, str] | None:
    """The attempt's first disrupted pod (the launcher, then workers by index) and its condition's reason and
    message: one that carries DisruptionTarget and is going or Failed, else one that is gone already."""
    for pod in observed.launcher_first(attempt, lambda s: s.terminating or s.phase == "Failed"):
        if (why := podstate.disruption(pod)) is not None:
            return pod, *why
    gone = [(s, p) for p in observed.disrupted_gone if (s := podsnapshot.state(p)).attempt == attempt]
    for _, pod in sorted(gone, key=lambda g: (g[0].role != names.LAUNCHER_ROLE, g[0].replica or 0)):
        if (why := podstate.disruption(pod)) is not None:
            return pod, *why
    return None


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, cap: int) -> Outcome:
    """Restart a disrupted attempt; STOP when it did (the job is restarting, or has failed once past `cap`)."""
    attempt = plan.status.attempt
    found = disrupted_pod(observed, attempt)
    if found is None:
        return CONTINUE
    pod, reason, message = found
    within_cap = plan.status.disruptions < cap
    past_cap = "" if within_cap else f" (past --max-disruption-restarts {cap}: counted as a failure)"
    report = failure_report.disruption_report(job, pod, reason, message + past_cap, attempt)
    failure.attempt_failed(plan, job, observed, now, report, disrupted=within_cap)
    plan.stop_reason = graceful_stop.DISRUPTED
    return STOP
