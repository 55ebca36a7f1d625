"""The MPIJob API, kubeflow.org/v2beta1: the single source of truth for the CRD, docs and controller.

Field names and meanings follow kubeflow/mpi-operator's v2beta1 types so that existing manifests, Kueue
and the Kubeflow SDK work unchanged. Python attributes are snake_case; the wire format is camelCase.
Pod templates stay plain dicts: they are validated by the apiserver against the real PodTemplateSpec
schema, and every field in them, known to us or not, survives a parse/serialize round trip.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from mpiop.api.base import ApiModel as ApiModel
from mpiop.api.base import Time as Time
from mpiop.api.base import format_time as format_time
from mpiop.api.trainer import Metric as Metric
from mpiop.api.trainer import TrainerStatus as TrainerStatus

GROUP = "kubeflow.org"
VERSION = "v2beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MPIJob"
PLURAL = "mpijobs"
SINGULAR = "mpijob"
SHORT_NAMES = ("mpij",)

ReplicaType = Literal["Launcher", "Worker"]
LAUNCHER: Literal["Launcher"] = "Launcher"
WORKER: Literal["Worker"] = "Worker"
RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["None", "Running", "All"]
LauncherCreationPolicy = Literal["AtStartup", "WaitForWorkersReady"]
MPIImplementation = Literal["OpenMPI", "Intel", "MPICH"]
# ReplicaFailure is mpiop's, as a ReplicaSet's: True while the job's objects cannot be created.
ConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "ReplicaFailure",
                        "Stopping"]
ConditionStatus = Literal["True", "False", "Unknown"]

DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
DEFAULT_LAUNCHER_CREATION_POLICY: LauncherCreationPolicy = "AtStartup"
DEFAULT_MPI_IMPLEMENTATION: MPIImplementation = "OpenMPI"
# The key under which a field's CRD default travels in its JSON Schema (mpiop.api.crd writes it as the
# schema's `default`). Pydantic's own `default` stays None: a field the apiserver did not default (an object
# stored before the CRD had defaults) still reads as unset, and the effective_* properties give it the same value.
CRD_DEFAULT = "x-crd-default"


def crd_default(value: str | bool) -> dict[str, Any]:
    """`json_schema_extra` for a field that kubeflow's CRD defaults: the apiserver writes `value` into objects."""
    return {CRD_DEFAULT: value}
DEFAULT_BACKOFF_LIMIT = 6  # what a batch/v1 Job (kubeflow's launcher) defaults to
# The largest job mpiop is tested at (bench/huge.py): the CRD refuses more workers at admission, and a job
# stored before that bound is failed with ValidationError instead of being attempted.
MAX_WORKER_REPLICAS = 10_000

# Kubeflow's Go types use int32 for counts and int64 for activeDeadlineSeconds; the CRD says so too, so a
# manifest that kubeflow's apiserver schema rejects is rejected here as well.
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1, json_schema_extra={"format": "int32"})]
# An extended resource's name: a DNS-subdomain prefix, '/', a name (nvidia.com/gpu, amd.com/gpu,
# gpu.intel.com/i915, nvidia.com/mig-1g.5gb).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
EXTENDED_RESOURCE_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# No maximum for int64: the apiserver reads schema bounds as float64, where 2**63 - 1 overflows.
Int64 = Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})]


class ReplicaSpec(ApiModel):
    """How to run one kind of replica (the launcher, or the workers)."""

    replicas: Int32 | None = Field(
        default=None,
        description="Number of pods of this replica type. Defaults to 1. The Launcher must have exactly 1.",
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="The pod template (a core/v1 PodTemplateSpec) that each replica is created from.",
    )
    restart_policy: RestartPolicy | None = Field(
        default=None,
        description=(
            "Restart policy of the replica's pods: Always, OnFailure, Never or ExitCode. ExitCode lets the "
            "kubelet restart containers that exit with a retryable code (128-255 are retryable, 1-127 "
            "permanent). Defaults to Never."
        ),
    )

    @property
    def replica_count(self) -> int:
        return 1 if self.replicas is None else self.replicas


class SchedulingPolicy(ApiModel):
    """Gang-scheduling hints (Volcano, scheduler-plugins coscheduling, Kueue)."""

    min_available: Int32 | None = Field(
        default=None, description="Pods that must be schedulable together. Defaults to all workers + launcher."
    )
    queue: str | None = Field(default=None, description="Queue name for the gang scheduler.")
    min_resources: dict[str, int | str] | None = Field(
        default=None, description="Minimum resources the gang needs (resource name to quantity)."
    )
    priority_class: str | None = Field(default=None, description="PriorityClass of the gang.")
    schedule_timeout_seconds: Int32 | None = Field(
        default=None, description="How long the gang may wait to be scheduled."
    )


class RunPolicy(ApiModel):
    """Run-time policies of a job: clean-up, deadlines, retries, suspension."""

    clean_pod_policy: CleanPodPolicy | None = Field(
        default=None,
        description=(
            "Which pods to delete once the job finished: None keeps all, Running deletes those still "
            "Pending or Running (freeing their GPUs), All deletes every pod. Defaults to Running."
        ),
    )
    ttl_seconds_after_finished: Int32 | None = Field(
        default=None,
        description="Seconds after the job finished (Succeeded or Failed) when the MPIJob itself is deleted.",
    )
    active_deadline_seconds: Int64 | None = Field(
        default=None,
        description="Seconds from startTime the job may run before it is failed with reason DeadlineExceeded.",
    )
    backoff_limit: Int32 | None = Field(
        default=None,
        description=(
            "Failures allowed before the job is marked Failed: restarts of the whole job after a failed pod, "
            "and failed runs of containers restarted in place under restartPolicy OnFailure. Defaults to 6."
        ),
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        default=None, description="Gang-scheduling parameters."
    )
    suspend: bool | None = Field(
        default=None,
        json_schema_extra=crd_default(False),
        description=(
            "While true, the job's pods are deleted and not created; resuming recreates them from the "
            "current templates. Defaults to false."
        ),
    )
    managed_by: str | None = Field(
        default=None,
        max_length=63,
        description=(
            "The controller that reconciles this job. Empty or kubeflow.org/mpi-operator means mpiop; any "
            "other value (e.g. kueue.x-k8s.io/multikueue) makes mpiop leave the job alone. Immutable."
        ),
    )

    @property
    def effective_clean_pod_policy(self) -> CleanPodPolicy:
        return self.clean_pod_policy or "Running"

    @property
    def effective_backoff_limit(self) -> int:
        return DEFAULT_BACKOFF_LIMIT if self.backoff_limit is None else self.backoff_limit


class MPIJobSpec(ApiModel):
    """The desired state of an MPIJob: its launcher and workers, and how the MPI world is wired."""

    slots_per_worker: Int32 | None = Field(
        default=None,
        description=(
            "Slots (MPI processes) per worker in the hostfile. When unset, the worker's GPUs: its container's GPU "
            "limit (gpuResource if set; else nvidia.com/gpu, amd.com/gpu, another */gpu, a MIG profile "
            "nvidia.com/mig-*, gpu.intel.com/i915 or gpu.intel.com/xe) plus the devices its DRA claims request from "
            "GPU device classes (the launcher's, with runLauncherAsWorker and no Worker), else 1."
        ),
    )
    run_launcher_as_worker: bool | None = Field(
        default=None,
        json_schema_extra=crd_default(False),
        description="Whether the launcher also runs ranks (it is listed first in the hostfile). Defaults to false.",
    )
    ssh_auth_mount_path: str | None = Field(
        default=None,
        pattern=r"^/",
        json_schema_extra=crd_default(DEFAULT_SSH_AUTH_MOUNT_PATH),
        description=(
            "Where the SSH key Secret is mounted in launcher and workers: an absolute path, the .ssh directory "
            "of the user the containers run as. Defaults to /root/.ssh."
        ),
    )
    launcher_creation_policy: LauncherCreationPolicy | None = Field(
        default=None,
        json_schema_extra=crd_default(DEFAULT_LAUNCHER_CREATION_POLICY),
        description=(
            "When the launcher pod is created: AtStartup (with the workers) or WaitForWorkersReady (once "
            "every worker pod is Ready). Defaults to AtStartup."
        ),
    )
    mpi_implementation: MPIImplementation | None = Field(
        default=None,
        json_schema_extra=crd_default(DEFAULT_MPI_IMPLEMENTATION),
        description=(
            "The MPI implementation, which sets the hostfile format and launcher env: OpenMPI, Intel or "
            "MPICH. Defaults to OpenMPI."
        ),
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        json_schema_extra={"format": "int32"},
        description=(
            "mpiop extension (the MPI operator proposal's simple mode): the job's total GPUs. Before any pod "
            "exists mpiop lays the job out on the nodes the Worker template may run on (whole nodes first, the "
            "same GPUs per worker, fewest workers) and writes Worker.replicas, the first worker container's "
            "GPU limit and slotsPerWorker (if unset) into the job, recorded in annotation "
            "mpiop.kubeflow.org/gpu-layout. Leave Worker.replicas and the GPU limit out, or set both so that "
            "replicas x limit = gpus."
        ),
    )
    gpu_resource: str | None = Field(
        default=None,
        pattern=EXTENDED_RESOURCE_PATTERN,
        max_length=253 + 1 + 63,  # a DNS subdomain, '/', a name
        description=(
            "mpiop extension: the extended resource spec.gpus counts, e.g. amd.com/gpu, gpu.intel.com/i915 or "
            f"a MIG profile such as nvidia.com/mig-1g.5gb. Defaults to {DEFAULT_GPU_RESOURCE}."
        ),
    )
    gpu_device_class_name: str | None = Field(
        default=None,
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
        description=(
            "mpiop extension: spec.gpus through DRA (resource.k8s.io/v1). The DeviceClass whose devices spec.gpus "
            "counts, e.g. gpu.nvidia.com: each node's GPUs are the devices of that class its ResourceSlices publish, "
            "and the layout is written as a ResourceClaimTemplate <job>-gpus (made by mpiop, owned by the job) "
            "requesting the GPUs per worker, claim `gpus` of the Worker template and of its first container. "
            "Leave Worker.replicas and that claim out, or set both. Not with spec.gpuResource."
        ),
    )
    mpi_replica_specs: dict[ReplicaType, ReplicaSpec] = Field(
        default_factory=dict,
        description="The Launcher and Worker replica specs.",
    )
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Run-time policies of the job.")

    @field_validator("mpi_replica_specs", mode="before")
    @classmethod
    def _known_replica_types(cls, value: Any) -> Any:
        if isinstance(value, dict):
            unknown = sorted(set(value) - {LAUNCHER, WORKER})
            if unknown:
                raise ValueError(f"spec.mpiReplicaSpecs: unknown replica type(s) {unknown}; use Launcher, Worker")
        return value

    @property
    def launcher(self) -> ReplicaSpec | None:
        return self.mpi_replica_specs.get(LAUNCHER)

    @property
    def worker(self) -> ReplicaSpec | None:
        return self.mpi_replica_specs.get(WORKER)

    @property
    def worker_replicas(self) -> int:
        return self.worker.replica_count if self.worker is not None else 0

    @property
    def effective_ssh_auth_mount_path(self) -> str:
        return self.ssh_auth_mount_path or DEFAULT_SSH_AUTH_MOUNT_PATH

    @property
    def effective_launcher_creation_policy(self) -> LauncherCreationPolicy:
        return self.launcher_creation_policy or DEFAULT_LAUNCHER_CREATION_POLICY

    @property
    def effective_mpi_implementation(self) -> MPIImplementation:
        return self.mpi_implementation or DEFAULT_MPI_IMPLEMENTATION


class JobCondition(ApiModel):
    """One observed state of the job; `kubectl wait --for=condition=Succeeded` reads these."""

    type: ConditionType = Field(
        description=(
            "Type of the condition: Created, Running, Restarting, Succeeded, Failed or Suspended; mpiop also sets "
            "ReplicaFailure (True while an object of the job cannot be created: the reason and message say which "
            "and why) and Stopping (True while a graceful stop waits for the launcher: the reason says why the "
            "attempt ends, the message until when)."
        )
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    reason: str | None = Field(default=None, description="A CamelCase reason for the last transition.")
    message: str | None = Field(default=None, description="A human-readable message about the last transition.")
    last_update_time: Time | None = Field(default=None, description="When this condition was last updated.")
    last_transition_time: Time | None = Field(
        default=None, description="When the status of this condition last changed."
    )


class ReplicaStatus(ApiModel):
    """Pod counts of one replica type."""

    active: int | None = Field(default=None, description="Pods of this type that are Pending or Running.")
    succeeded: int | None = Field(default=None, description="Pods of this type that Succeeded.")
    failed: int | None = Field(default=None, description="Pods of this type that Failed.")
    ready: int | None = Field(
        default=None, description="mpiop extension: pods of this type that are Running and Ready."
    )
    selector: str | None = Field(
        default=None, description="Label selector of this type's pods, in the string form (for kubectl and HPA)."
    )


class FailureInfo(ApiModel):
    """mpiop extension: the pod blamed for the last failed attempt (the condition message says more)."""

    reason: str = Field(
        description=(
            "Why it failed: the container's reason (OOMKilled, Error, StartError, ...), the pod's (Evicted), its "
            "DisruptionTarget condition's (EvictionByEvictionAPI, PreemptionByScheduler, ...), or, from the "
            "launcher's log, WorkerLost (mpirun lost the worker) or RankFailed (a rank there died)."
        ),
    )
    pod: str | None = Field(default=None, description="The pod blamed: a worker when one died, else the launcher.")
    container: str | None = Field(default=None, description="Its container that failed.")
    exit_code: int | None = Field(default=None, description="That container's exit code.")
    node: str | None = Field(default=None, description="The node the pod ran on.")
    ranks: str | None = Field(
        default=None, description="The MPI ranks the hostfile put on the pod, e.g. 2-3 (none for the launcher)."
    )
    attempt: int | None = Field(default=None, description="The attempt (restartCount at the time) that failed.")
    time: Time | None = Field(default=None, description="When mpiop saw the failure.")


NodeName = Annotated[str, Field(description="A node's name (its kubernetes.io/hostname label).")]


class TaintedDevice(ApiModel):
    """mpiop extension: a DRA device a NoExecute device taint (KEP-5055) was on when its pod was evicted."""

    driver: str = Field(description="The ResourceSlice's driver, e.g. gpu.nvidia.com.")
    pool: str = Field(description="The ResourceSlice's pool.")
    device: str = Field(description="The device's name in its slice, e.g. gpu-3.")
    taints: list[Annotated[str, Field(description="A taint, key=value:NoExecute.")]] = Field(
        description="Its NoExecute taints.")


class NodeExclusion(ApiModel):
    """mpiop extension: why a node of status.excludedNodes is avoided."""

    node: NodeName
    message: str = Field(description="What happened there, e.g. `pi-worker-1 failed there (DisruptionTarget ...)`.")
    attempt: int | None = Field(default=None, description="The attempt (restartCount at the time) that failed there.")
    devices: list[TaintedDevice] | None = Field(
        default=None,
        description=("The DRA devices a NoExecute device taint was on when it evicted the pod: those allocated to "
                     "its claims, or, with its claims already gone, the node's (onNode)."),
    )
    on_node: bool | None = Field(
        default=None, description="True when devices are the node's tainted ones, the pod's claims being gone.")


class JobStatus(ApiModel):
    """The observed state of an MPIJob, written by the controller through the status subresource."""

    conditions: list[JobCondition] = Field(
        default_factory=list,
        description=(
            "Observed conditions of the job, one per type. The condition of the current state is kept last, "
            "which the State column of `kubectl get mpijobs` shows."
        ),
    )
    replica_statuses: dict[ReplicaType, ReplicaStatus] = Field(
        default_factory=dict, description="Pod counts per replica type."
    )
    start_time: Time | None = Field(default=None, description="When the job's pods were first created.")
    completion_time: Time | None = Field(default=None, description="When the job finished.")
    last_reconcile_time: Time | None = Field(default=None, description="When mpiop last changed this status.")
    restart_count: int | None = Field(
        default=None,
        description=("mpiop extension: how many times the whole job was restarted after a failed pod (containers "
                     "restarted in place are counted in the Running condition's message)."),
    )
    disruption_restarts: int | None = Field(
        default=None,
        description=(
            "mpiop extension: how many of restartCount's restarts followed a disruption (a pod evicted, preempted "
            "or deleted by the taint manager: its DisruptionTarget condition); they do not count against "
            "backoffLimit, up to the operator's --max-disruption-restarts."
        ),
    )
    excluded_nodes: list[NodeName] | None = Field(
        default=None,
        description=(
            "mpiop extension: nodes the job's next attempts avoid (a required node affinity kubernetes.io/hostname "
            "NotIn), because an attempt failed there for a node's reason: the pod was evicted for node pressure or "
            "off a NotReady or deleted node, or exited with one of the operator's --node-fault-exit-codes. The "
            "most recent --max-excluded-nodes are kept; annotation mpiop.kubeflow.org/exclude-failed-nodes: "
            "\"false\" turns it off."
        ),
    )
    node_exclusions: list[NodeExclusion] | None = Field(
        default=None,
        description=("mpiop extension: why each of excludedNodes is avoided, in the same order: what failed there, "
                     "and for a device taint's eviction which DRA device was tainted how."),
    )
    attempt_start_time: Time | None = Field(
        default=None,
        description="mpiop extension: when the current attempt started (startTime, or the last restart).",
    )
    last_failure: FailureInfo | None = Field(
        default=None, description="mpiop extension: the pod blamed for the last failed attempt."
    )
    scheduled_time: Time | None = Field(
        default=None,
        description="mpiop extension: when every pod of the current attempt had been scheduled to a node.",
    )
    ranks_running_time: Time | None = Field(
        default=None,
        description=("mpiop extension: when the current attempt's launcher and every worker first ran (the Running "
                     "condition); the progress deadline counts from it until the first report."),
    )
    first_progress_time: Time | None = Field(
        default=None, description="mpiop extension: when mpiop first saw the current attempt report progress.",
    )
    trainer_status: TrainerStatus | None = Field(
        default=None,
        description=("mpiop extension, Kubeflow Trainer's trainerStatus (KEP-2779): the progress the job last "
                     "reported to mpiop's status endpoint (kept after the job finished)."),
    )

    def deep_copy(self) -> JobStatus:
        """A copy to change freely: validated from a dump, which costs a third of model_copy(deep=True)'s
        deepcopy, taken once a reconcile."""
        return JobStatus.model_validate(self.model_dump())

    def condition(self, condition_type: ConditionType) -> JobCondition | None:
        return next((c for c in self.conditions if c.type == condition_type), None)

    def is_true(self, condition_type: ConditionType) -> bool:
        found = self.condition(condition_type)
        return found is not None and found.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true("Succeeded") or self.is_true("Failed")

    @property
    def attempt(self) -> int:
        """The current attempt: restartCount, which is unset (0) until the first restart."""
        return self.restart_count or 0

    @property
    def disruptions(self) -> int:
        """disruptionRestarts, unset (0) until the first restart after a disruption."""
        return self.disruption_restarts or 0


class ObjectMeta(ApiModel):
    """The metadata mpiop reads; everything else in metadata is kept by the apiserver, not by us."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None


class MPIJob(ApiModel):
    """An MPI job: one launcher pod running mpirun, and worker pods it reaches over SSH."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: MPIJobSpec = Field(default_factory=MPIJobSpec)
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"
