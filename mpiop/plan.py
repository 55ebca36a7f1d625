"""What one reconcile decided: the status to write and the object changes to make, before any I/O.

The decision functions (policies, desired-object builders, status) fill a Plan from
(job, observed objects, now); the reconciler only carries it out, status first, so a crash between the
two writes never loses a decision such as a counted restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mpiop import names, podstate
from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.podstate import Pod

JSON = dict[str, Any]


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass
class Observed:
    """The job's objects as the caches see them now."""

    pods: list[Pod] = field(default_factory=list)
    config_map: JSON | None = None
    secret: JSON | None = None
    service: JSON | None = None
    # kubeflow/mpi-operator's launcher `Job` (`<job>-launcher`) controlled by this job, and the pods of any such
    # Job (kubeflow labels them with the job's name): present only for jobs taken over from kubeflow's operator.
    launcher_job: JSON | None = None
    launcher_job_pods: list[Pod] = field(default_factory=list)
    # The last lines of a failed container's log, by pod name: read by the controller for the pod that
    # status.failure_report.log_request names (decisions never do I/O).
    log_tails: dict[str, str] = field(default_factory=dict)
    pod_group: JSON | None = None  # only with gang scheduling on

    def pod(self, name: str) -> Pod | None:
        return next((p for p in self.pods if podstate.name(p) == name), None)

    def pods_of_attempt(self, attempt: int) -> list[Pod]:
        return [p for p in self.pods if podstate.attempt(p) == attempt]

    def launcher(self, job: MPIJob, attempt: int) -> Pod | None:
        """The attempt's launcher (each attempt's launcher has its own name)."""
        return self.pod(names.launcher_name(job, attempt))

    def workers(self, job: MPIJob, attempt: int) -> dict[int, Pod]:
        """Current-attempt worker pods by worker index (the `-worker-<i>` of their names: the replica-index
        label counts from 1 with runLauncherAsWorker, and did not in kubeflow's releases before v0.8)."""
        found: dict[int, Pod] = {}
        for pod in self.pods:
            index = names.worker_index(job, podstate.name(pod))
            if (podstate.role(pod) == names.WORKER_ROLE and podstate.attempt(pod) == attempt and index is not None
                    and podstate.replica_index(pod) is not None):
                found[index] = pod
        return found


@dataclass(frozen=True)
class PodGroupWrite:
    """Gang scheduling: create the PodGroup (before any pod is created), merge-patch its spec, or delete it."""

    verb: Literal["create", "patch", "delete"]
    name: str
    body: JSON = field(default_factory=dict)  # the PodGroup (create) or the merge patch (patch)


@dataclass
class Plan:
    status: JobStatus
    create: list[JSON] = field(default_factory=list)
    update: list[JSON] = field(default_factory=list)
    delete: list[Pod] = field(default_factory=list)
    create_ssh_secret: bool = False
    delete_job: bool = False
    # kubeflow's launcher Job of an adopted job, to delete (with its pods) when its run is over.
    delete_launcher_job: JSON | None = None
    events: list[Event] = field(default_factory=list)
    pod_group: PodGroupWrite | None = None
    requeue_after: float | None = None

    def requeue_in(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def event(self, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(kind, reason, message))

    def delete_pods(self, pods: list[Pod]) -> None:
        """Delete these pods (once each; ones already going are left alone)."""
        planned = {podstate.name(p) for p in self.delete}
        for pod in pods:
            if not podstate.is_terminating(pod) and podstate.name(pod) not in planned:
                self.delete.append(pod)
                planned.add(podstate.name(pod))
