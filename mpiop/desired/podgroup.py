"""The PodGroup a gang-scheduled MPIJob wants, and what its pods carry to join it: pure functions of the job.

Field values are kubeflow/mpi-operator v2beta1's (pkg/controller/podgroup.go), so a platform moving from it
with `--gang-scheduling` gets the same gangs:

* one PodGroup per job, named like the job, owned by it;
* minMember: schedulingPolicy.minAvailable, else every worker + the launcher;
* minResources: schedulingPolicy.minResources, else the sum of the requests (a limit stands in for a missing
  request) of the first minMember pods: the launcher, then the workers (none when minMember is 0);
* scheduler-plugins (`scheduling.x-k8s.io/v1alpha1`): scheduleTimeoutSeconds (0 when unset: the
  coscheduler's own permit timeout applies); pods get schedulerName and the `scheduling.x-k8s.io/pod-group`
  label;
* Volcano (`scheduling.volcano.sh/v1beta1`): queue (the policy's, else the job's
  `scheduling.volcano.sh/queue-name` annotation), priorityClassName (the policy's, else the launcher's, else
  the workers' template); pods get `schedulerName: volcano` and the `scheduling.k8s.io/group-name`
  annotation. The template's own schedulerName is overwritten, as kubeflow does.

Where mpiop differs, on purpose:

* launcherCreationPolicy WaitForWorkersReady (kubeflow #608): the launcher is created only once every worker
  is Ready, so a gang that counts it can never be complete and nothing starts. The launcher is left out of
  the gang's minimum: minMember defaults to the workers (a minAvailable above that is lowered to it, with a
  warning) and minResources sums the workers only. The launcher still joins the PodGroup (label/annotation),
  and a scheduled gang admits it as an extra member.
* kubeflow orders launcher and workers by their PriorityClass values when minAvailable leaves some out;
  with a higher-priority worker it then multiplies the launcher's requests by minAvailable-1. mpiop always
  counts the launcher and minAvailable-1 workers, which is kubeflow's result whenever that is sane, and reads
  no PriorityClasses (no cluster-wide permission needed).
* Volcano's queue is written as `default` when none is given: the value Volcano's CRD defaults it to, so
  the stored object is kubeflow's and an unchanged spec is never rewritten.
* The PodGroup also carries the job's labels (kubeflow's has none).

Kubernetes' own gangs (`--gang-scheduling kubernetes`: `scheduling.k8s.io/v1beta1`, the default kube-scheduler's
GangScheduling plugin, Kubernetes v1.37 with the GenericWorkload gate; kubeflow has no such mode):

* one PodGroup per attempt, `<job>-<attempt>` (names.attempt_pod_group_name): a pod's spec.schedulingGroup is
  immutable and the group's PodGroupInitiallyScheduled condition never reverts, so each attempt is a new gang;
* schedulingPolicy.gang.minCount: minMember as above (at least 1, which the API requires); it is the one mutable
  field, patched as Worker.replicas changes. No minResources or timeout: the API has neither (the scheduler's
  Permit wait is a constant 5 minutes);
* disruptionMode `{all: {}}`: a preemption takes the gang as one;
* priorityClassName: the pods' one class. The scheduler fails a group whose pods' priority is not the group's, or
  whose pods name different schedulers, with SchedulerError; such a job is refused (a ValueError) instead;
* pods keep their schedulerName and get `spec.schedulingGroup.podGroupName`, never in the MPIJob's templates.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob, ReplicaSpec
from mpiop.desired.quantity import Quantity

KIND = "PodGroup"
PLURAL = "podgroups"
VOLCANO = "volcano"
KUBERNETES = "kubernetes"
KUBERNETES_GROUP = "scheduling.k8s.io"
KUBERNETES_VERSION = "v1beta1"
SCHEDULER_PLUGINS_GROUP = "scheduling.x-k8s.io"
SCHEDULER_PLUGINS_VERSION = "v1alpha1"
VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
VOLCANO_DEFAULT_QUEUE = "default"
# The condition the default scheduler writes after each of a group's scheduling cycles (True once placed, for good).
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


@dataclass(frozen=True)
class GangScheduler:
    """`--gang-scheduling NAME`: `volcano`, or the schedulerName of a scheduler-plugins Coscheduling profile."""

    scheduler_name: str

    @property
    def volcano(self) -> bool:
        return self.scheduler_name == VOLCANO

    @property
    def kubernetes(self) -> bool:
        """Kubernetes' own gangs: the default scheduler's, one PodGroup per attempt."""
        return self.scheduler_name == KUBERNETES

    @property
    def group(self) -> str:
        if self.kubernetes:
            return KUBERNETES_GROUP
        return VOLCANO_GROUP if self.volcano else SCHEDULER_PLUGINS_GROUP

    @property
    def version(self) -> str:
        if self.kubernetes:
            return KUBERNETES_VERSION
        return VOLCANO_VERSION if self.volcano else SCHEDULER_PLUGINS_VERSION

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{PLURAL}.{self.group}"

    @property
    def spec_fields(self) -> tuple[str, ...]:
        """The spec fields mpiop owns: compared to decide an update, and the only ones it writes (of Kubernetes' the one
        that may change, minCount inside schedulingPolicy; the rest is immutable)."""
        if self.kubernetes:
            return ("schedulingPolicy",)
        if self.volcano:
            return ("minMember", "queue", "priorityClassName", "minResources")
        return ("minMember", "scheduleTimeoutSeconds", "minResources")


def gang_scheduler(flag: str | None) -> GangScheduler | None:
    """The gang scheduler a `--gang-scheduling` value names; None (off) when empty."""
    flag = (flag or "").strip()
    return GangScheduler(flag) if flag else None


# Every mode's spec fields above: all the PodGroup informer keeps of a spec (controller.trims).
OWNED_SPEC_FIELDS = ("minMember", "queue", "priorityClassName", "minResources", "scheduleTimeoutSeconds",
                     "schedulingPolicy")


def pod_group_name(job: MPIJob, scheduler: GangScheduler, attempt: int) -> str:
    """The job's PodGroup: named like the job (kubeflow's), or Kubernetes' one of this attempt."""
    return names.attempt_pod_group_name(job, attempt) if scheduler.kubernetes else job.metadata.name


def counts_launcher(job: MPIJob) -> bool:
    """Whether the launcher is part of the gang's minimum (not with WaitForWorkersReady and workers to wait for)."""
    return job.spec.effective_launcher_creation_policy == "AtStartup" or job.spec.worker_replicas == 0


def _wanted_min_member(job: MPIJob) -> int:
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return job.spec.worker_replicas + (1 if counts_launcher(job) else 0)


def min_member(job: MPIJob) -> int:
    """minMember, and never more pods than can exist before the gang is scheduled."""
    wanted = _wanted_min_member(job)
    return wanted if counts_launcher(job) else min(wanted, job.spec.worker_replicas)


def min_member_warning(job: MPIJob) -> str | None:
    """Why minAvailable was lowered (WaitForWorkersReady), for an Event; None when it was taken as given."""
    wanted, used = _wanted_min_member(job), min_member(job)
    if wanted == used:
        return None
    return (f"spec.runPolicy.schedulingPolicy.minAvailable {wanted} counts the launcher, which "
            f"launcherCreationPolicy WaitForWorkersReady creates only once the workers are Ready: the PodGroup "
            f"asks for {used} (the workers), so the gang cannot wait for a pod that waits for it")


def _pod_requests(replica_type: str, replica: ReplicaSpec) -> dict[str, Quantity]:
    """Per pod: each container's requests, a limit standing in for a missing request (kubeflow's addResources)."""
    total: dict[str, Quantity] = {}
    for index, container in enumerate((replica.template.get("spec") or {}).get("containers") or []):
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            field = f"spec.mpiReplicaSpecs.{replica_type}.template.spec.containers[{index}].resources[{name}]"
            quantity = Quantity.parse(value, field)
            total[name] = total[name] + quantity if name in total else quantity
    return total


def min_resources(job: MPIJob) -> dict[str, str] | None:
    """The gang's minResources: the policy's, else the summed requests of the pods minMember counts."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.min_resources is not None:
        field = "spec.runPolicy.schedulingPolicy.minResources"
        return {k: str(Quantity.parse(v, f"{field}[{k}]")) for k, v in sorted(policy.min_resources.items())}
    members = min_member(job)
    if members == 0:
        return None
    counted: list[tuple[str, ReplicaSpec, int]] = []
    workers = job.spec.worker_replicas
    if counts_launcher(job):
        if job.spec.launcher is not None:
            counted.append((LAUNCHER, job.spec.launcher, 1))
        if members < workers + 1:
            workers = members - 1
    else:
        workers = min(members, workers)
    if job.spec.worker is not None:
        counted.append((WORKER, job.spec.worker, workers))
    total: dict[str, Quantity] = {}
    for replica_type, replica, count in counted:
        if count <= 0:
            continue
        for name, quantity in _pod_requests(replica_type, replica).items():
            total[name] = total[name] + quantity * count if name in total else quantity * count
    return {name: str(quantity) for name, quantity in sorted(total.items())} or None  # no requests: none


def priority_class(job: MPIJob) -> str:
    """The policy's priorityClass, else the launcher template's priorityClassName, else the workers'."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class:
        return policy.priority_class
    for replica in (job.spec.launcher, job.spec.worker):
        if replica is not None and (name := (replica.template.get("spec") or {}).get("priorityClassName")):
            return str(name)
    return ""


def _template_spec(replica: ReplicaSpec | None) -> JSON:
    return (replica.template.get("spec") or {}) if replica is not None else {}


def pods_priority_class(job: MPIJob) -> str:
    """Kubernetes' gangs: the one priorityClassName of the job's pods, the PodGroup's too ("" none: the cluster's
    default). A ValueError when the launcher and workers name different classes or schedulers, or the scheduling
    policy another class: the default scheduler would fail the group with SchedulerError, for ever."""
    replicas = [(LAUNCHER, job.spec.launcher), (WORKER, job.spec.worker if job.spec.worker_replicas else None)]
    specs = [(t, _template_spec(r)) for t, r in replicas if r is not None]
    for field, default in (("priorityClassName", ""), ("schedulerName", "default-scheduler")):
        found = {t: str(spec.get(field) or default) for t, spec in specs}
        if len(set(found.values())) > 1:
            told = " and ".join(f"{t} {v!r}" for t, v in found.items())
            raise ValueError(f"--gang-scheduling kubernetes places the launcher and workers as one PodGroup, whose "
                             f"pods must have one {field}: the templates have {told}")
    classes = {str(spec.get("priorityClassName") or "") for _, spec in specs}
    pods_class = classes.pop() if classes else ""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class and policy.priority_class != pods_class:
        raise ValueError(f"spec.runPolicy.schedulingPolicy.priorityClass {policy.priority_class!r} is not the pods' "
                         f"priorityClassName ({pods_class!r}): --gang-scheduling kubernetes needs the PodGroup's "
                         f"priority to be its pods' (set priorityClassName on the templates)")
    return pods_class


def queue(job: MPIJob) -> str:
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.queue:
        return policy.queue
    return job.metadata.annotations.get(VOLCANO_QUEUE_ANNOTATION) or VOLCANO_DEFAULT_QUEUE


def kubernetes_spec(job: MPIJob) -> JSON:
    """A scheduling.k8s.io/v1beta1 PodGroup's spec (a ValueError for pods of different classes)."""
    spec: JSON = {"schedulingPolicy": {"gang": {"minCount": max(1, min_member(job))}}, "disruptionMode": {"all": {}}}
    if priority := pods_priority_class(job):
        spec["priorityClassName"] = priority
    return spec


def pod_group_spec(job: MPIJob, scheduler: GangScheduler) -> JSON:
    if scheduler.kubernetes:
        return kubernetes_spec(job)
    spec: JSON = {"minMember": min_member(job)}
    if scheduler.volcano:
        spec["queue"] = queue(job)
        if priority := priority_class(job):
            spec["priorityClassName"] = priority
    else:
        policy = job.spec.run_policy.scheduling_policy
        timeout = policy.schedule_timeout_seconds if policy is not None else None
        spec["scheduleTimeoutSeconds"] = timeout or 0
    if (resources := min_resources(job)) is not None:
        spec["minResources"] = resources
    return spec


def pod_group(job: MPIJob, scheduler: GangScheduler, attempt: int = 0) -> JSON:
    return {
        "apiVersion": scheduler.api_version,
        "kind": KIND,
        "metadata": names.owned_metadata(job, pod_group_name(job, scheduler, attempt)),
        "spec": pod_group_spec(job, scheduler),
    }


def spec_patch(scheduler: GangScheduler, wanted: JSON, observed: JSON) -> JSON | None:
    """A merge patch of the fields mpiop owns that differ (unset ones sent as null), or None when all agree."""
    have = observed.get("spec") or {}
    changed = {k: wanted.get(k) for k in scheduler.spec_fields if have.get(k) != wanted.get(k)}
    return {"spec": changed} if changed else None


def join_pod(pod: JSON, job: MPIJob, scheduler: GangScheduler, attempt: int) -> None:
    """Put a pod (of `attempt`) in the job's gang: Kubernetes' spec.schedulingGroup (its own schedulerName kept), or
    the gang scheduler's name and the PodGroup's label or annotation."""
    name = pod_group_name(job, scheduler, attempt)
    if scheduler.kubernetes:
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        return
    pod["spec"]["schedulerName"] = scheduler.scheduler_name
    metadata = pod["metadata"]
    if scheduler.volcano:
        metadata.setdefault("annotations", {})[VOLCANO_GROUP_NAME_ANNOTATION] = name
    else:
        metadata.setdefault("labels", {})[POD_GROUP_LABEL] = name
