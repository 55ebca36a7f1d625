"""A fluent builder of MPIJobs: with `testkit.pods`, the one test vocabulary of unit and integration tests
and the bench.

In the style of kueue's `testingjobs.MakeMPIJob(name, ns).…Obj()`: start from a small valid job and chain
only what a test is about, so the test reads as its own specification::

    job = make_mpijob("pi").workers(2).gpus(4).implementation("Intel").obj()
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any, Self

from mpiop.api.raw import JSON
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
)

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

    def total_gpus(self, n: int | str, resource: str | None = None, device_class: str | None = None) -> Self:
        """mpiop's total-GPU mode: spec.gpus (and spec.gpuResource, or through DRA spec.gpuDeviceClassName),
        Worker.replicas left to mpiop."""
        self._spec["gpus"] = n
        if resource is not None:
            self._spec["gpuResource"] = resource
        if device_class is not None:
            self._spec["gpuDeviceClassName"] = device_class
        self._replica(WORKER).pop("replicas", None)
        return self

    def limit(self, replica: ReplicaType, resource: str, quantity: int | str) -> Self:
        self._container(replica).setdefault("resources", {}).setdefault("limits", {})[resource] = quantity
        return self

    def request(self, replica: ReplicaType, resource: str, quantity: int | str) -> Self:
        self._container(replica).setdefault("resources", {}).setdefault("requests", {})[resource] = quantity
        return self

    def claim(self, name: str, template: str | None = None, shared: str | None = None, request: str | None = None,
              replica: ReplicaType = WORKER) -> Self:
        """A DRA claim on the replica's pods (made per pod from ResourceClaimTemplate `template`, or the one claim
        `shared` several pods use), used by its main container (all of it, or its request `request`)."""
        source = {"resourceClaimTemplateName": template} if template is not None else {"resourceClaimName": shared}
        claims = self._pod_spec(replica).setdefault("resourceClaims", [])
        if not any(c["name"] == name for c in claims):
            claims.append({"name": name, **source})
        used = {"name": name, **({"request": request} if request is not None else {})}
        self._container(replica).setdefault("resources", {}).setdefault("claims", []).append(used)
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
