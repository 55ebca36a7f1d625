"""A fluent builder of a job's trimmed Pods as the controller's cache holds them, and `observe`, the cache's
contents that decide() reads::

    pod = make_pod(job, "worker", 1).failed(reason="OOMKilled", exit_code=137).obj()

`make_pod(...).obj()` has the shape `controller.trims.trim_pod` keeps, with the names and labels `desired.pods` gives
the pod.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, Self

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import API_VERSION, MPIJob, format_time
from mpiop.desired import objects
from mpiop.plan import Observed
from mpiop.policies import host_ports
from testkit.mpijobs import CONTAINER, T0, MPIJobBuilder


def _pod_uid(name: str, attempt: int) -> str:
    return f"uid-{name}-{attempt}"


class PodBuilder:
    """A trimmed Pod of `job` as the cache holds it: Pending until told otherwise."""

    def __init__(self, job: MPIJob, role: str, index: int = 0, attempt: int = 0) -> None:
        if role not in (names.LAUNCHER_ROLE, names.WORKER_ROLE):
            raise ValueError(f"role must be {names.LAUNCHER_ROLE!r} or {names.WORKER_ROLE!r}, not {role!r}")
        name = names.launcher_name(job, attempt) if role == names.LAUNCHER_ROLE else names.worker_name(job, index)
        self._job, self._attempt = job, attempt
        self._pod: JSON = {
            "metadata": {
                "name": name,
                "namespace": job.metadata.namespace,
                "uid": _pod_uid(name, attempt),
                "labels": (names.launcher_labels(job, attempt) if role == names.LAUNCHER_ROLE
                           else names.role_labels(job, role, names.worker_label_index(job, index), attempt)),
                "ownerReferences": [{"apiVersion": API_VERSION, "kind": "MPIJob", "name": job.metadata.name,
                                     "uid": job.metadata.uid, "controller": True}],
            },
            "status": {"phase": "Pending"},
        }

    @property
    def _status(self) -> JSON:
        status: JSON = self._pod["status"]
        return status

    def phase(self, phase: str, ready: bool | None = None) -> Self:
        """Only the phase (and Ready when given), no container statuses: e.g. a bare Failed pod."""
        self._status.clear()
        self._status["phase"] = phase
        if ready is not None:
            self._status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        return self

    def pending(self) -> Self:
        return self.phase("Pending")

    def running(self) -> Self:
        """Running, not (yet) Ready."""
        return self.phase("Running", ready=False)

    def ready(self) -> Self:
        return self.phase("Running", ready=True)

    def started(self, container: str = CONTAINER) -> Self:
        """Ready, its container reported running (so its log can be read)."""
        self.phase("Running", ready=True)
        self._status["containerStatuses"] = [{"name": container, "state": {"running": {}}, "lastState": {}}]
        return self

    def succeeded(self, container: str = CONTAINER) -> Self:
        self.phase("Succeeded", ready=False)
        self._status["containerStatuses"] = [_terminated(container, "Completed", 0)]
        return self

    def failed(self, container: str = CONTAINER, reason: str = "Error", exit_code: int = 1, message: str = "") -> Self:
        """Failed, its container terminated (`message`: the kubelet's termination message, e.g. a runtime error)."""
        self.phase("Failed", ready=False)
        self._status["containerStatuses"] = [_terminated(container, reason, exit_code, message)]
        return self

    def restarted(self, container: str = CONTAINER, reason: str = "OOMKilled", exit_code: int = 137) -> Self:
        """Running again after its container died in place (restartPolicy OnFailure/Always): lastState says how."""
        self.phase("Running", ready=True)
        self._status["containerStatuses"] = [
            {"name": container, "state": {}, "lastState": _terminated(container, reason, exit_code)["state"]}]
        return self

    def init_waiting(self, container: str, reason: str, message: str = "") -> Self:
        """Pending with `container` (an init container) waiting, e.g. on an image the kubelet cannot pull."""
        self.phase("Pending")
        waiting = {"reason": reason, "message": message} if message else {"reason": reason}
        self._status["initContainerStatuses"] = [{"name": container, "state": {"waiting": waiting}, "lastState": {}}]
        return self

    def on_node(self, node: str) -> Self:
        self._pod["spec"] = {"nodeName": node}
        return self

    def evicted(self, message: str = "The node was low on resource: memory.") -> Self:
        self.phase("Failed")
        self._status.update(reason="Evicted", message=message)
        return self

    def disrupted(self, reason: str = "EvictionByEvictionAPI", message: str = "Eviction API: evicting") -> Self:
        """Carrying DisruptionTarget=True, as Kubernetes marks a pod it evicts, preempts or deletes off a failing
        node (the phase is left as it is: the kubelet then fails it, or it is deleted)."""
        self._status.setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message})
        return self

    def unschedulable(self, message: str = "0/3 nodes are available: 3 node(s) didn't have free ports for the "
                                           "requested pod ports.") -> Self:
        """Pending, with the scheduler's PodScheduled=False message (by default: a host-port conflict)."""
        self.phase("Pending")
        self._status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
        return self

    def unknown(self) -> Self:
        return self.phase("Unknown")

    def launched_workers(self, count: int | None) -> Self:
        """A launcher that started with `count` workers (None: one made before mpiop recorded it)."""
        labels = self._pod["metadata"]["labels"]
        labels.pop(names.LAUNCHED_WORKERS_LABEL, None)
        if count is not None:
            labels[names.LAUNCHED_WORKERS_LABEL] = str(count)
        return self

    def replacement(self) -> Self:
        """A worker mpiop made again while its attempt's launcher (as make_pod builds it) ran."""
        launcher_uid = _pod_uid(names.launcher_name(self._job, self._attempt), self._attempt)
        self._pod["metadata"]["labels"][names.REPLACEMENT_LABEL] = launcher_uid
        return self

    def created(self, when: dt.datetime = T0) -> Self:
        self._pod["metadata"]["creationTimestamp"] = format_time(when)
        return self

    def terminating(self, when: dt.datetime = T0) -> Self:
        """Being deleted (deletionTimestamp set); the phase is left as it is."""
        self._pod["metadata"]["deletionTimestamp"] = format_time(when)
        return self

    def label(self, key: str, value: str) -> Self:
        self._pod["metadata"]["labels"][key] = value
        return self

    def obj(self) -> JSON:
        return copy.deepcopy(self._pod)


def _terminated(container: str, reason: str, exit_code: int, message: str = "") -> JSON:
    terminated: JSON = {"exitCode": exit_code, "reason": reason}
    if message and exit_code:
        terminated["message"] = message
    return {"name": container, "state": {"terminated": terminated}, "lastState": {}}


def main_container(pod: JSON) -> JSON:
    """A pod's first container: the one mpiop's pods run the job in."""
    container: JSON = pod["spec"]["containers"][0]
    return container


def env_of(pod_or_container: JSON) -> dict[str, Any]:
    """A container's environment as name -> value (for a variable read from elsewhere, its `valueFrom`); given a
    pod, its main container's."""
    container = main_container(pod_or_container) if "spec" in pod_or_container else pod_or_container
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def make_pod(job: MPIJob | MPIJobBuilder, role: str, index: int = 0, attempt: int = 0) -> PodBuilder:
    """A pod of `job` in `role` ("launcher" or "worker"); the launcher's index is 0."""
    return PodBuilder(job.obj() if isinstance(job, MPIJobBuilder) else job, role, index, attempt)


def observe(job: MPIJob, pods: list[JSON] | None = None, *, owned_objects: bool = True,
            cluster_domain: str = "") -> Observed:
    """What the caches would hold: these pods, and (unless owned_objects=False) the Secret, the Service and a
    ConfigMap that is up to date with the current attempt's Running workers."""
    pods = list(pods or [])
    if not owned_objects:
        return Observed(pods=pods)
    attempt = job.status.attempt
    running = sorted(i for i, p in Observed(pods=pods).workers(job, attempt).items()
                     if i < job.spec.worker_replicas and podstate.is_running(p))
    ports = host_ports.table(job, attempt, pods, None)
    return Observed(
        pods=pods,
        config_map=objects.config_map(job, running, cluster_domain, ports),
        secret=objects.ssh_secret(job, b"private", b"public"),
        service=objects.service(job),
    )
