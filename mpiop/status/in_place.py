"""Container failures the kubelet restarts in place (restartPolicy OnFailure), counted against backoffLimit.

A Kubernetes Job counts them (its controller's pastBackoffLimitOnFailure sums the restartCount of OnFailure
pods) and kubeflow's launcher is such a Job, so a launcher in CrashLoopBackOff must end its MPIJob too: no
Failed phase ever comes for such a pod. Each failed run counts once it has ended (podstate.container_failures),
within the current attempt's pods; added to the attempts already failed (status.restartCount), they fail the
job once they pass backoffLimit, as failed pods do (status.backoff counts them). The attempt is the job's current
one, as this pass found it (job.status).
"""

from __future__ import annotations

from mpiop import podsnapshot, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed
from mpiop.status import backoff

# Pods named in a note: a job whose every worker crash-loops is told by its first few.
NAMED_PODS = 3


def failed_pods(observed: Observed, attempt: int) -> list[podstate.Pod]:
    """The attempt's pods (not being deleted) with a container that failed and was restarted in place: the
    launcher first, then workers by index."""
    return observed.launcher_first(attempt, lambda s: s.in_place_failures > 0 and not s.terminating)


def note(job: MPIJob, observed: Observed) -> str:
    """e.g. `pi-launcher container main Error exit 1 (2 failed runs, restarted in place); failure 2 of backoffLimit 6`
    ('' when nothing restarted in place): what the Running condition and the ContainerRestarted Event say."""
    pods = failed_pods(observed, job.status.attempt)
    if not pods:
        return ""
    told = [f"{_what(p)} ({_runs(podsnapshot.state(p).in_place_failures)}, restarted in place)"
            for p in pods[:NAMED_PODS]]
    if len(pods) > NAMED_PODS:
        told.append(f"{len(pods) - NAMED_PODS} more pods")
    return f"{'; '.join(told)}; {backoff.count(job, observed)}"


def _what(pod: podstate.Pod) -> str:
    """How its container last failed; only its name once the kubelet no longer reports the failed run (it may
    drop lastState)."""
    return podstate.failure_summary(pod) if podstate.container_failure(pod) else podstate.name(pod)


def _runs(runs: int) -> str:
    return "1 failed run" if runs == 1 else f"{runs} failed runs"
