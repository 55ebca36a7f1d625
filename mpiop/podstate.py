"""Reading a (trimmed) Pod: phase, readiness, attempt, and why one failed. The one reader of a pod's fields:
`podsnapshot.State` reads them through these, and `controller.trims.trim_pod` keeps what these read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpiop import names
from mpiop.api.raw import JSON

Pod = JSON


def phase(pod: Pod) -> str:
    return str(pod.get("status", {}).get("phase") or "Pending")


def name(pod: Pod) -> str:
    return str(pod["metadata"]["name"])


def uid(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("uid") or "")


def labels(pod: Pod) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


def is_terminating(pod: Pod) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def marked_terminating(pod: Pod, deleted_at: str) -> Pod:
    """This pod as the apiserver has it once a deletion was accepted (graceful: still there, going)."""
    return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": deleted_at}}


def active_in(pod_phase: str, terminating: bool) -> bool:
    """Pending or Running (or Unknown: its node stopped reporting) and not being deleted: what replicaStatuses
    counts as active. On the fields, for podsnapshot.State too."""
    return pod_phase in ("Pending", "Running", "Unknown") and not terminating


def running_in(pod_phase: str, terminating: bool) -> bool:
    """Running and not being deleted. On the fields, for podsnapshot.State too."""
    return pod_phase == "Running" and not terminating


def is_active(pod: Pod) -> bool:
    return active_in(phase(pod), is_terminating(pod))


def is_running(pod: Pod) -> bool:
    return running_in(phase(pod), is_terminating(pod))


def is_ready(pod: Pod) -> bool:
    if not is_running(pod):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions") or []
    )


def unschedulable_message(pod: Pod) -> str:
    """The scheduler's reason a Pending pod has no node yet ('' when it is scheduled or not yet looked at)."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return ""


# The condition the apiserver, scheduler, taint manager, pod GC or kubelet puts on a pod it is about to end for a
# reason outside the pod (EvictionByEvictionAPI, PreemptionByScheduler, DeletionByTaintManager, DeletionByPodGC,
# TerminationByKubelet): what a Kubernetes Job's podFailurePolicy matches to not count a failure.
DISRUPTION_TARGET = "DisruptionTarget"
DISRUPTION_MESSAGE_KEPT = 300


def disruption(pod: Pod) -> tuple[str, str] | None:
    """(reason, message) of the pod's DisruptionTarget=True condition; None when it has none."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == DISRUPTION_TARGET and condition.get("status") == "True":
            return str(condition.get("reason") or DISRUPTION_TARGET), str(condition.get("message") or "")
    return None


def attempt(pod: Pod) -> int:
    try:
        return int(labels(pod).get(names.ATTEMPT_LABEL, "0"))
    except ValueError:
        return -1


def is_kept_launcher(pod: Pod, current_attempt: int) -> bool:
    """The failed launcher of the attempt before the current one: kept (one, bounded) so that
    `kubectl logs` still shows why that attempt failed; any older one goes."""
    return (role(pod) == names.LAUNCHER_ROLE and attempt(pod) == current_attempt - 1 and phase(pod) == "Failed"
            and not is_terminating(pod))


def launched_workers(launcher: Pod) -> int | None:
    """The worker count a launcher started its ranks on (names.LAUNCHED_WORKERS_LABEL); None on a launcher made
    before mpiop recorded it."""
    count = labels(launcher).get(names.LAUNCHED_WORKERS_LABEL, "")
    return int(count) if count.isdigit() else None


def replaces_under(worker: Pod, launcher: Pod) -> bool:
    """The worker was made while `launcher` existed, in place of one that launcher started with."""
    return bool(uid(launcher)) and labels(worker).get(names.REPLACEMENT_LABEL) == uid(launcher)


def replica_index(pod: Pod) -> int | None:
    try:
        return int(labels(pod)[names.REPLICA_INDEX_LABEL])
    except (KeyError, ValueError):
        return None


def role(pod: Pod) -> str:
    return labels(pod).get(names.JOB_ROLE_LABEL, "")


# The kubelet's termination message (a runtime error such as `exec: "mpirunx": executable file not found`,
# or the log tail of a FallbackToLogsOnError container) is kept this long in the cache: its end.
TERMINATION_MESSAGE_KEPT = 512


@dataclass(frozen=True)
class ContainerFailure:
    """A container that terminated with a non-zero code; `previous` when it has restarted since (its log is
    then read with `previous=true`)."""

    container: str
    reason: str
    exit_code: int
    message: str = ""
    previous: bool = False


def node_name(pod: Pod) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def container_failure(pod: Pod) -> ContainerFailure | None:
    """The first container (init containers first) that terminated with a non-zero code, now or before its last
    restart."""
    statuses = pod.get("status", {})
    for status in (statuses.get("initContainerStatuses") or []) + (statuses.get("containerStatuses") or []):
        current = (status.get("state") or {}).get("terminated")
        terminated = current or (status.get("lastState") or {}).get("terminated")
        if isinstance(terminated, dict) and int(terminated.get("exitCode", 0)) != 0:
            return ContainerFailure(str(status.get("name")), str(terminated.get("reason") or "Error"),
                                    int(terminated["exitCode"]), str(terminated.get("message") or ""),
                                    previous=not current)
    return None


# The kubelet's waiting reasons of a container whose image it cannot get: a pull that failed (and is retried with
# a back-off), a reference it cannot parse, or a pull that imagePullPolicy Never forbids.
IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


def image_pull_failure(pod: Pod, container: str) -> tuple[str, str] | None:
    """(reason, message) while the kubelet cannot get the image of `container` (init containers too); else None."""
    statuses = pod.get("status", {})
    for status in (statuses.get("initContainerStatuses") or []) + (statuses.get("containerStatuses") or []):
        waiting = (status.get("state") or {}).get("waiting") or {}
        if status.get("name") == container and waiting.get("reason") in IMAGE_PULL_FAILURES:
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def restart_policy(pod: Pod) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


# The kubelet's state of a container whose latest run failed and that waits to be run again.
CRASH_LOOP = "CrashLoopBackOff"


def container_failures(status: dict[str, Any]) -> int:
    """How many times this container's runs failed: restartCount (under OnFailure each restart follows a
    failure), plus its latest run while that failed and waits in CrashLoopBackOff or shows terminated.

    The kubelet raises restartCount when it starts the next run, so a container that just failed for the
    first time still says 0; counting the failed run that waits makes a failure count when it happens, as a
    Failed pod does, not a back-off later. A new run being created already carries the raised count.
    """
    state = status.get("state") or {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    failed_now = (int(terminated.get("exitCode", 0)) != 0
                  or (waiting.get("reason") == CRASH_LOOP and int(last.get("exitCode", 0)) != 0))
    return int(status.get("restartCount") or 0) + int(failed_now)


def in_place_failures(pod: Pod) -> int:
    """Failures of this pod's containers that the kubelet restarts in place: only under restartPolicy OnFailure,
    the one policy that restarts a container because it failed (what a Kubernetes Job counts against its
    backoffLimit, with its init containers). As there, only while the pod is active: a Failed pod counts once
    as such, and a Succeeded one healed."""
    if restart_policy(pod) != "OnFailure" or phase(pod) in ("Succeeded", "Failed"):
        return 0
    status = pod.get("status") or {}
    return sum(container_failures(s) for key in ("initContainerStatuses", "containerStatuses")
               for s in status.get(key) or ())


def exit_code(pod: Pod) -> int | None:
    found = container_failure(pod)
    return found.exit_code if found else None


def failure_summary(pod: Pod) -> str:
    """e.g. `pi-worker-1 container main OOMKilled exit 137`, or `pi-worker-0 Evicted: <kubelet's message>`."""
    found = container_failure(pod)
    if found is not None:
        return f"{name(pod)} container {found.container} {found.reason} exit {found.exit_code}"
    status = pod.get("status", {})
    reason = status.get("reason") or "Failed"
    message = status.get("message")
    return f"{name(pod)} {reason}: {message}" if message else f"{name(pod)} {reason}"
