"""Fluent builders of MPIJobs and (trimmed) Pods: the one test vocabulary of unit and integration tests,
the bench and the dev tools (devcluster's pi job).

In the style of kueue's `testingjobs.MakeMPIJob(name, ns).…Obj()`: start from a small valid job and chain
only what a test is about, so the test reads as its own specification::

    job = make_mpijob("pi").workers(2).gpus(4).implementation("Intel").obj()
    pod = make_pod(job, "worker", 1).failed(reason="OOMKilled", exit_code=137).obj()

`make_pod(...).obj()` has the shape `podstate.trim` keeps, with the names and labels `desired.pods` gives
the pod, so it stands for what the controller's cache holds.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, Self

from mpiop import names, podstate
from mpiop.api.v2beta1 import (
    LAUNCHER,
    WORKER,
    CleanPodPolicy,
    ConditionStatus,
    ConditionType,
    JobCondition,
    JobStatus,
    LauncherCreationPolicy,
    MPIImplementation,
    MPIJob,
    ReplicaType,
    RestartPolicy,
    format_time,
)
from mpiop.desired import objects
from mpiop.plan import Observed
from mpiop.policies import host_ports

JSON = dict[str, Any]

IMAGE = "mpioperator/mpi-pi:openmpi"
CONTAINER = "main"
LAUNCHER_COMMAND = ["mpirun", "/home/mpiuser/pi"]

# A fixed instant for tests that need a clock; `at(s)` is s seconds after it.
T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float = 0) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


class MPIJobBuilder:
    """An MPIJob under construction: one launcher (running mpirun) and `workers(n)` workers (default 2)."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self._job: JSON = {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {
                "mpiReplicaSpecs": {
                    LAUNCHER: {
                        "replicas": 1,
                        "template": {"spec": {"containers": [
                            {"name": CONTAINER, "image": IMAGE, "command": list(LAUNCHER_COMMAND)},
                        ]}},
                    },
                    WORKER: {
                        "replicas": 2,
                        "template": {"spec": {"containers": [{"name": CONTAINER, "image": IMAGE}]}},
                    },
                },
                "runPolicy": {},
            },
        }
        self._status = JobStatus()

    # --- helpers -------------------------------------------------------------------------------------------

    @property
    def _spec(self) -> JSON:
        spec: JSON = self._job["spec"]
        return spec

    @property
    def _run_policy(self) -> JSON:
        run_policy: JSON = self._spec["runPolicy"]
        return run_policy

    def _replica(self, replica: ReplicaType) -> JSON:
        found: JSON = self._spec["mpiReplicaSpecs"][replica]
        return found

    def _pod_spec(self, replica: ReplicaType) -> JSON:
        spec: JSON = self._replica(replica).setdefault("template", {}).setdefault("spec", {})
        return spec

    def _container(self, replica: ReplicaType) -> JSON:
        container: JSON = self._pod_spec(replica).setdefault("containers", [{"name": CONTAINER}])[0]
        return container

    def _template_meta(self, replica: ReplicaType) -> JSON:
        meta: JSON = self._replica(replica).setdefault("template", {}).setdefault("metadata", {})
        return meta

    # --- metadata ------------------------------------------------------------------------------------------

    def uid(self, uid: str) -> Self:
        self._job["metadata"]["uid"] = uid
        return self

    def label(self, key: str, value: str) -> Self:
        self._job["metadata"].setdefault("labels", {})[key] = value
        return self

    def annotation(self, key: str, value: str) -> Self:
        self._job["metadata"].setdefault("annotations", {})[key] = value
        return self

    def resource_version(self, version: str) -> Self:
        self._job["metadata"]["resourceVersion"] = version
        return self

    # --- spec ----------------------------------------------------------------------------------------------

    def workers(self, n: int) -> Self:
        self._replica(WORKER)["replicas"] = n
        return self

    def without(self, replica: ReplicaType) -> Self:
        """Drop a replica spec altogether (e.g. a launcher-only job)."""
        del self._spec["mpiReplicaSpecs"][replica]
        return self

    def slots(self, n: int) -> Self:
        self._spec["slotsPerWorker"] = n
        return self

    def gpus(self, n: int | str, resource: str = "nvidia.com/gpu", replica: ReplicaType = WORKER) -> Self:
        """A limit of `n` of `resource` on the replica's main container."""
        return self.limit(replica, resource, n)

    def limit(self, replica: ReplicaType, resource: str, quantity: int | str) -> Self:
        self._container(replica).setdefault("resources", {}).setdefault("limits", {})[resource] = quantity
        return self

    def request(self, replica: ReplicaType, resource: str, quantity: int | str) -> Self:
        self._container(replica).setdefault("resources", {}).setdefault("requests", {})[resource] = quantity
        return self

    def implementation(self, implementation: MPIImplementation) -> Self:
        self._spec["mpiImplementation"] = implementation
        return self

    def launcher_as_worker(self, value: bool = True) -> Self:
        self._spec["runLauncherAsWorker"] = value
        return self

    def launcher_creation_policy(self, policy: LauncherCreationPolicy) -> Self:
        self._spec["launcherCreationPolicy"] = policy
        return self

    def wait_for_workers_ready(self) -> Self:
        return self.launcher_creation_policy("WaitForWorkersReady")

    def ssh_auth_mount_path(self, path: str) -> Self:
        self._spec["sshAuthMountPath"] = path
        return self

    def restart_policy(self, replica: ReplicaType, policy: RestartPolicy) -> Self:
        self._replica(replica)["restartPolicy"] = policy
        return self

    # --- pod templates -------------------------------------------------------------------------------------

    def image(self, image: str, replica: ReplicaType | None = None) -> Self:
        for r in (replica,) if replica else (LAUNCHER, WORKER):
            self._container(r)["image"] = image
        return self

    def command(self, replica: ReplicaType, *command: str) -> Self:
        self._container(replica)["command"] = list(command)
        return self

    def args(self, replica: ReplicaType, *args: str) -> Self:
        self._container(replica)["args"] = list(args)
        return self

    def env(self, replica: ReplicaType, name: str, value: str) -> Self:
        self._container(replica).setdefault("env", []).append({"name": name, "value": value})
        return self

    def container(self, replica: ReplicaType, **fields: Any) -> Self:
        """Set fields (wire names: volumeMounts=..., workingDir=...) on the replica's main container."""
        self._container(replica).update(copy.deepcopy(fields))
        return self

    def pod_spec(self, replica: ReplicaType, **fields: Any) -> Self:
        """Set fields (wire names: nodeSelector=..., volumes=..., restartPolicy=...) on the template's spec."""
        self._pod_spec(replica).update(copy.deepcopy(fields))
        return self

    def host_network(self, *replicas: ReplicaType) -> Self:
        """hostNetwork: true on these replicas' templates (default: both)."""
        for r in replicas or (LAUNCHER, WORKER):
            self._pod_spec(r)["hostNetwork"] = True
        return self

    def pod_label(self, replica: ReplicaType, key: str, value: str) -> Self:
        self._template_meta(replica).setdefault("labels", {})[key] = value
        return self

    def pod_annotation(self, replica: ReplicaType, key: str, value: str) -> Self:
        self._template_meta(replica).setdefault("annotations", {})[key] = value
        return self

    # --- run policy ----------------------------------------------------------------------------------------

    def backoff_limit(self, n: int) -> Self:
        self._run_policy["backoffLimit"] = n
        return self

    def clean_pod_policy(self, policy: CleanPodPolicy) -> Self:
        self._run_policy["cleanPodPolicy"] = policy
        return self

    def deadline(self, seconds: int) -> Self:
        self._run_policy["activeDeadlineSeconds"] = seconds
        return self

    def ttl(self, seconds: int) -> Self:
        self._run_policy["ttlSecondsAfterFinished"] = seconds
        return self

    def suspend(self, value: bool = True) -> Self:
        self._run_policy["suspend"] = value
        return self

    def scheduling_policy(self, **fields: Any) -> Self:
        """runPolicy.schedulingPolicy fields by wire name (minAvailable=2, queue="q", minResources={...})."""
        self._run_policy.setdefault("schedulingPolicy", {}).update(copy.deepcopy(fields))
        return self

    def managed_by(self, controller: str) -> Self:
        self._run_policy["managedBy"] = controller
        return self

    def run_policy(self, **fields: Any) -> Self:
        """Set run policy fields by wire name (backoffLimit=..., schedulingPolicy=...)."""
        self._run_policy.update(copy.deepcopy(fields))
        return self

    def spec(self, **fields: Any) -> Self:
        """Set top-level spec fields by wire name (slotsPerWorker=..., sshAuthMountPath=...)."""
        self._spec.update(copy.deepcopy(fields))
        return self

    # --- status --------------------------------------------------------------------------------------------

    def status(self, status: JobStatus | None = None, **fields: Any) -> Self:
        """Replace the status, or set some of its fields by Python name (restart_count=1, start_time=T0)."""
        if status is not None:
            self._status = status.model_copy(deep=True)
        if fields:
            self._status = self._status.model_copy(update=fields, deep=True)
        return self

    def condition(self, condition_type: ConditionType, status: ConditionStatus = "True", reason: str = "",
                  message: str = "", when: dt.datetime = T0) -> Self:
        """Append one condition as written at `when` (no ordering: the status is taken as given)."""
        self._status.conditions.append(JobCondition(
            type=condition_type, status=status, reason=reason or f"MPIJob{condition_type}", message=message,
            last_update_time=when, last_transition_time=when,
        ))
        return self

    # --- results -------------------------------------------------------------------------------------------

    def obj(self) -> MPIJob:
        job = MPIJob.model_validate(copy.deepcopy(self._job))
        job.status = self._status.model_copy(deep=True)
        return job

    def json(self) -> JSON:
        """The wire form, as a client would send it."""
        return self.obj().to_json()

    def manifest(self) -> JSON:
        """What a user applies: the spec as written, metadata with only the name and labels, no status."""
        manifest = copy.deepcopy(self._job)
        metadata = manifest["metadata"]
        manifest["metadata"] = {"name": metadata["name"], **({"labels": metadata["labels"]} if "labels" in metadata
                                                                else {})}
        return manifest


def make_mpijob(name: str, namespace: str = "default") -> MPIJobBuilder:
    return MPIJobBuilder(name, namespace)


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
                "ownerReferences": [{"kind": "MPIJob", "name": job.metadata.name, "uid": job.metadata.uid,
                                     "controller": True}],
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
    attempt = job.status.restart_count or 0
    running = sorted(i for i, p in Observed(pods=pods).workers(job, attempt).items()
                     if i < job.spec.worker_replicas and podstate.is_running(p))
    ports = host_ports.table(job, attempt, pods, None)
    return Observed(
        pods=pods,
        config_map=objects.config_map(job, running, cluster_domain, ports),
        secret=objects.ssh_secret(job, b"private", b"public"),
        service=objects.service(job),
    )
