"""What one reconcile decided: the status to write and the object changes to make, before any I/O.

The decision functions (policies, desired-object builders, status) fill a Plan from
(job, observed objects, now); the reconciler only carries it out, status first, so a crash between the
two writes never loses a decision such as a counted restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from mpiop import names, podsnapshot, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import JobStatus, MPIJob, TaintedDevice
from mpiop.podstate import Pod

# The longest message mpiop sends in an Event (kubeflow's recorder and `kubectl describe` expect short ones), and
# the cap on a condition message built from something unbounded (an apiserver's answer, an annotation).
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str

    def __post_init__(self) -> None:
        if len(self.message) > MESSAGE_LIMIT:
            object.__setattr__(self, "message", self.message[:MESSAGE_LIMIT])


@dataclass(frozen=True)
class Refusal:
    """The apiserver's answer to one creation that did not succeed: seen by the next decision like a pod is.

    `code` 409 with reason AlreadyExists is an object of that name the job does not control (a squatter);
    403, 400 and 422 are the apiserver (or an admission plugin) refusing the object itself.
    """

    kind: str
    name: str
    code: int
    reason: str
    message: str

    @property
    def name_taken(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"

    @property
    def forbidden(self) -> bool:
        """A 403, as ApiError.forbidden: RBAC, or an admission plugin refusing the object."""
        return self.code == 403


@dataclass(frozen=True)
class DeviceFault:
    """The devices a NoExecute device taint was on when it evicted a pod; `on_node`: the node's, its claims gone."""

    devices: tuple[TaintedDevice, ...]
    on_node: bool = False
    more: int = 0  # tainted devices left out (a status names at most MAX_TAINTED_DEVICES)

    def describe(self) -> str:
        """`device gpu-3 of driver gpu.example.com tainted example.com/unhealthy=true:NoExecute; ...`"""
        where = " on its node" if self.on_node else ""
        told = [f"device {d.device} of driver {d.driver}{where} tainted {', '.join(d.taints)}" for d in self.devices]
        return "; ".join(told + ([f"and {self.more} more"] if self.more else []))


@dataclass
class Observed:
    """The job's objects as the caches see them now, and what the apiserver answered to the last creations.

    Lookups by name and by (attempt) are indexed once, so a decision stays linear in the number of pods.
    """

    pods: list[Pod] = field(default_factory=list)
    # The job's pods someone else deleted with a DisruptionTarget that were gone before a pass saw them going (as
    # the cache last held them; the controller keeps them until the job's attempt moves past theirs): a preempted
    # gang's pods can be removed within a few milliseconds, and an unbound pod's deletion is immediate.
    disrupted_gone: list[Pod] = field(default_factory=list)
    config_map: JSON | None = None
    secret: JSON | None = None
    service: JSON | None = None
    # kubeflow/mpi-operator's launcher `Job` (`<job>-launcher`) controlled by this job, and the pods of any such
    # Job (kubeflow labels them with the job's name): present only for jobs taken over from kubeflow's operator.
    launcher_batch_job: JSON | None = None
    launcher_batch_job_pods: list[Pod] = field(default_factory=list)
    # The last lines of a failed container's log, by pod name: read by the controller for the pod that
    # status.failure_report.log_request names (decisions never do I/O).
    log_tails: dict[str, str] = field(default_factory=dict)
    # Gang scheduling only: the job's PodGroups (one, named like the job; Kubernetes' gangs: one per attempt).
    pod_groups: list[JSON] = field(default_factory=list)
    # Nodes found NotReady or deleted, with why (e.g. "deleted"): read by the controller, one GET each, for the
    # nodes policies/node_exclusion.nodes_to_check names when an attempt fails (the Node informer keeps only GPU nodes).
    node_faults: dict[str, str] = field(default_factory=dict)
    # A pod the device taint manager evicted -> which of its DRA devices was tainted how (policies/node_exclusion's
    # `tainted_devices`, from its ResourceClaims and its node's ResourceSlices, read by the controller).
    device_faults: dict[str, DeviceFault] = field(default_factory=dict)
    # The job's saved attempts' logs (`<job>-attempt-<n>` ConfigMaps): their metadata only.
    attempt_config_maps: list[JSON] = field(default_factory=list)
    # An exec-launched job's launcher access (desired.launcher_rbac): ServiceAccount, Role, RoleBinding.
    service_account: JSON | None = None
    role: JSON | None = None
    role_binding: JSON | None = None
    # A job started before uid-derived launcher names: its Role `<job>-launcher` (names.legacy_launcher_account_name),
    # which its running launcher's account is bound to; kept naming only the job's pods (desired.ensure).
    legacy_role: JSON | None = None
    refused: list[Refusal] = field(default_factory=list)
    # Nodes with an extended resource (trimmed to their labels, taints, schedulability and allocatable extended
    # resources), for laying out a job that states its total GPUs (policies/gpu_layout); None: not watched.
    nodes: list[JSON] | None = None
    # The ResourceClaimTemplates the job's pod templates name, by name, in its namespace (trimmed to their device
    # requests), for the slots of workers whose GPUs come through DRA claims (desired.gpus); None: not watched.
    claim_templates: dict[str, JSON] | None = None
    # Total-GPU mode through DRA (spec.gpuDeviceClassName): the cached ResourceSlices (trimmed to node, driver, pool and
    # devices counted by type) and DeviceClasses by name (trimmed to the devices they select); None: not watched.
    resource_slices: list[JSON] | None = None
    device_classes: dict[str, JSON] | None = None
    _states: list[podsnapshot.State] | None = field(default=None, init=False, repr=False, compare=False)
    _by_name: dict[str, Pod] | None = field(default=None, init=False, repr=False, compare=False)
    _worker_indexes: dict[str, int | None] = field(default_factory=dict, init=False, repr=False, compare=False)
    _workers: dict[int, dict[int, tuple[podsnapshot.State, Pod]]] = field(default_factory=dict, init=False,
                                                                         repr=False, compare=False)

    @property
    def states(self) -> list[podsnapshot.State]:
        """Each pod's state, in the order of `pods` (read once)."""
        if self._states is None:
            self._states = [podsnapshot.state(p) for p in self.pods]
        return self._states

    def pod(self, name: str) -> Pod | None:
        if self._by_name is None:
            self._by_name = {s.name: p for s, p in zip(self.states, self.pods, strict=True)}
        return self._by_name.get(name)

    def launcher(self, job: MPIJob, attempt: int) -> Pod | None:
        """The attempt's launcher (each attempt's launcher has its own name)."""
        return self.pod(names.launcher_name(job, attempt))

    def in_place_failures(self, attempt: int) -> int:
        """Container failures the kubelet restarted in place (restartPolicy OnFailure) in the attempt's pods that
        are not being deleted (one going for a restart, a scale-down or a suspend is no longer counted)."""
        return sum(s.in_place_failures for s in self.states if s.attempt == attempt and not s.terminating)

    def pod_group(self, name: str) -> JSON | None:
        return next((g for g in self.pod_groups if g["metadata"]["name"] == name), None)

    def pods_of_attempt(self, attempt: int) -> list[Pod]:
        return [p for s, p in zip(self.states, self.pods, strict=True) if s.attempt == attempt]

    def launcher_first(self, attempt: int, keep: Callable[[podsnapshot.State], bool]) -> list[Pod]:
        """The attempt's pods whose state `keep` keeps, the launcher first (it carries mpirun's exit and error), then
        workers by replica index: the order a failure is told in."""
        found = [(s, p) for s, p in zip(self.states, self.pods, strict=True) if s.attempt == attempt and keep(s)]
        found.sort(key=lambda f: (f[0].role != names.LAUNCHER_ROLE, f[0].replica or 0))
        return [p for _, p in found]

    def workers(self, job: MPIJob, attempt: int) -> dict[int, Pod]:
        """Current-attempt worker pods by worker index (the `-worker-<i>` of their names: the replica-index
        label counts from 1 with runLauncherAsWorker, and did not in kubeflow's releases before v0.8)."""
        return {i: pod for i, (_, pod) in self._attempt_workers(job, attempt).items()}

    def worker_states(self, job: MPIJob, attempt: int) -> dict[int, podsnapshot.State]:
        """The same workers' states."""
        return {i: state for i, (state, _) in self._attempt_workers(job, attempt).items()}

    def _attempt_workers(self, job: MPIJob, attempt: int) -> dict[int, tuple[podsnapshot.State, Pod]]:
        found = self._workers.get(attempt)
        if found is None:
            found = {}
            for state, pod in zip(self.states, self.pods, strict=True):
                if state.role != names.WORKER_ROLE or state.attempt != attempt or state.replica is None:
                    continue
                index = self.worker_index(job, state.name)
                if index is not None:
                    found[index] = (state, pod)
            self._workers[attempt] = found
        return found

    def worker_index(self, job: MPIJob, pod_name: str) -> int | None:
        """names.worker_index, read once per pod."""
        if pod_name not in self._worker_indexes:
            self._worker_indexes[pod_name] = names.worker_index(job, pod_name)
        return self._worker_indexes[pod_name]

    def workers_all(self, job: MPIJob, attempt: int, wanted: Callable[[podsnapshot.State], bool]) -> bool:
        """Whether every wanted worker (index below the job's count) of the attempt exists and is `wanted`."""
        count = job.spec.worker_replicas
        return sum(1 for i, (s, _) in self._attempt_workers(job, attempt).items() if i < count and wanted(s)) == count


@dataclass(frozen=True)
class PodGroupWrite:
    """Gang scheduling: create the PodGroup (before any pod is created), merge-patch its spec, or delete it."""

    verb: Literal["create", "patch", "delete"]
    name: str
    body: JSON = field(default_factory=dict)  # the PodGroup (create) or the merge patch (patch)


@dataclass(frozen=True)
class MPIJobPatch:
    """A merge patch of the MPIJob itself (written with its resourceVersion), and the Event it is told by."""

    body: JSON
    event: Event


@dataclass(frozen=True)
class LogSource:
    """One container's log to keep, or (`unreadable`) why there is none to read."""

    pod: str
    container: str | None  # None: no container of the pod started
    previous: bool = False  # the run before the container's last in-place restart
    unreadable: str = ""


@dataclass(frozen=True)
class Evidence:
    """A failed attempt's logs to save in ConfigMap `name` before its pods go, and older ones to delete."""

    name: str
    attempt: int
    summary: str  # the Restarting or Failed condition's message
    logs: list[LogSource]
    drop: list[str] = field(default_factory=list)
    progress: str = ""  # the job's last progress report (status.trainerStatus as JSON), if it made one


@dataclass
class CreationSteps:
    """The objects to create, in steps carried out in this order, each only once the one before succeeded whole
    (kubeflow's order): so no pod mounts a squatter's key or hostfile, and no launcher calls a squatter's pod.

    The SSH Secret (its key is made at write time: Plan.create_ssh_secret) goes first in `supporting`, and the
    PodGroup (Plan.pod_group) is written between `supporting` and the pods.
    """

    # The Service, the hostfile ConfigMap and (exec launch) the launcher's ServiceAccount, Role and RoleBinding.
    supporting: list[JSON] = field(default_factory=list)
    workers: list[JSON] = field(default_factory=list)
    launcher: list[JSON] = field(default_factory=list)

    def pod_steps(self) -> tuple[list[JSON], list[JSON]]:
        return self.workers, self.launcher

    def pods(self) -> list[JSON]:
        return [*self.workers, *self.launcher]

    def drop_pods(self) -> None:
        self.workers.clear()
        self.launcher.clear()

    def all(self) -> list[JSON]:
        """Every object, in the order they are created."""
        return [*self.supporting, *self.workers, *self.launcher]


@dataclass
class Plan:
    """The writes one reconcile carries out. A bool says what to do (`create_ssh_secret`, `delete_mpijob`); a
    collection names what it is done to (`objects_to_update`, `pods_to_delete`, ...)."""

    status: JobStatus
    creation_steps: CreationSteps = field(default_factory=CreationSteps)
    objects_to_update: list[JSON] = field(default_factory=list)
    pods_to_delete: list[Pod] = field(default_factory=list)
    # Pods of `pods_to_delete` given a grace period of their own, by name (the others get their pod's own).
    pod_grace_seconds: dict[str, int] = field(default_factory=dict)
    create_ssh_secret: bool = False  # with a key pair made at write time
    delete_mpijob: bool = False
    # kubeflow's launcher Job of an adopted job, to delete (with its pods) when its run is over.
    launcher_batch_job_to_delete: JSON | None = None
    events: list[Event] = field(default_factory=list)
    pod_group: PodGroupWrite | None = None
    # Kubernetes' gangs: the PodGroups of attempts no longer current, by name, to delete (after `pod_group`'s write).
    stale_pod_groups: list[str] = field(default_factory=list)
    evidence: Evidence | None = None
    mpijob_patch: MPIJobPatch | None = None  # total-GPU mode: the layout, written before anything else of the job
    requeue_after: float | None = None
    # Why this pass ends the attempt, when that is planned and not a rank's failure (Suspended, Disrupted,
    # DeadlineExceeded): policies/graceful_stop then deletes the launcher first and the workers after it ended.
    stop_reason: str | None = None

    @property
    def objects_to_create(self) -> list[JSON]:
        """Every object to create, in the order they are created (read-only: plan them in `creation_steps`)."""
        return self.creation_steps.all()

    def requeue_in(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def event(self, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(kind, reason, message))

    def delete_pods(self, pods: list[Pod], grace_seconds: int | None = None) -> None:
        """Delete these pods (once each; ones already going are left alone), with `grace_seconds` if given."""
        planned = {podstate.name(p) for p in self.pods_to_delete}
        for pod in pods:
            name = podstate.name(pod)
            if not podstate.is_terminating(pod) and name not in planned:
                self.pods_to_delete.append(pod)
                planned.add(name)
                if grace_seconds is not None:
                    self.pod_grace_seconds[name] = grace_seconds
