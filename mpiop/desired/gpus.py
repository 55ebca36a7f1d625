"""Which of a pod's resources are GPUs, and so how many MPI slots a worker offers: the one rule every reader uses.

**Extended resources** (a container's limits, else its requests: an extended resource's request equals its limit).
A job that states `spec.gpuResource` names its GPU: that resource alone counts. Otherwise, in this order:
`nvidia.com/gpu`, `amd.com/gpu`, any other `<domain>/gpu`, then the GPU resources not named `*/gpu`: NVIDIA's MIG
devices (`nvidia.com/mig-<profile>`, e.g. `nvidia.com/mig-1g.10gb`, each one GPU instance a rank can own) and
Intel's device plugin's `gpu.intel.com/i915` and `gpu.intel.com/xe`. A container's GPUs are its first of these
with a whole number above 0; a pod's, those of its first container that has any (a sidecar's come after).
`spec.gpus` (total-GPU mode, policies/gpu_layout) counts `layout_resource(job)`: the stated one, else
`nvidia.com/gpu`; once laid out the job states `slotsPerWorker`, so the layout and the slots agree.

**DRA** (Dynamic Resource Allocation, resource.k8s.io/v1): a pod names claims in `spec.resourceClaims` (`{name,
resourceClaimTemplateName}`: a claim of its own, made from the template; `{name, resourceClaimName}`: one claim
shared by several pods) and its containers use them in `resources.claims` (`{name, request?}`: the whole claim, or
one of its requests). Devices a container's per-pod claims request from a GPU device class (`--gpu-device-classes`)
are GPUs too: `exactly` with allocationMode `ExactCount` counts `count` (default 1); `firstAvailable` counts what
its alternatives all give. A shared claim adds none (its devices are not this pod's), nor a request of another
class or for admin access. A count known only once allocated (`All`, or alternatives that differ) needs
`slotsPerWorker`; a template not seen yet leaves the count unknown until it is (`Unresolved`).

Slots per worker: `slotsPerWorker` when set, else the hosts' GPUs (limits plus claimed devices) of the Worker
template (with `runLauncherAsWorker` and no workers, the Launcher's), else 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import DEFAULT_GPU_RESOURCE, LAUNCHER, WORKER, MPIJob, ReplicaType

PREFERRED_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MIG_PREFIX = "nvidia.com/mig-"
NOT_NAMED_GPU_RESOURCES = ("gpu.intel.com/i915", "gpu.intel.com/xe")
# NVIDIA's DRA driver's classes of whole GPUs and MIG devices, AMD's and Intel's GPU drivers' classes.
DEFAULT_GPU_DEVICE_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com"})


def is_gpu_resource(name: str, stated: str | None = None) -> bool:
    """Whether an extended resource is a GPU: the job's stated `spec.gpuResource` alone, else the known ones."""
    if stated is not None:
        return name == stated
    return name.endswith("/gpu") or name.startswith(MIG_PREFIX) or name in NOT_NAMED_GPU_RESOURCES


def _preference(name: str) -> tuple[int, str]:
    if name in PREFERRED_GPU_RESOURCES:
        return PREFERRED_GPU_RESOURCES.index(name), ""
    return (len(PREFERRED_GPU_RESOURCES), name) if name.endswith("/gpu") else (len(PREFERRED_GPU_RESOURCES) + 1, name)


def layout_resource(job: MPIJob) -> str:
    """The resource total-GPU mode (spec.gpus) counts on nodes and writes as the worker's limit."""
    return job.spec.gpu_resource or DEFAULT_GPU_RESOURCE


def container_gpus(container: JSON, stated: str | None = None) -> int | None:
    """The container's GPUs: its first GPU resource (in the order above) with a whole number above 0."""
    resources = container.get("resources") or {}
    amounts: JSON = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    for name in sorted((n for n in amounts if is_gpu_resource(n, stated)), key=_preference):
        try:
            value = int(str(amounts[name]))
        except ValueError:
            continue
        if value > 0:
            return value
    return None


def gpus_per_pod(template: JSON, stated: str | None = None) -> int | None:
    """GPUs the first container with a GPU limit asks for (extended resources are whole numbers)."""
    for container in (template.get("spec") or {}).get("containers") or []:
        if (gpus := container_gpus(container, stated)) is not None:
            return gpus
    return None


# -- DRA ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unresolved:
    """Why a worker's slots are not known: `waiting` for a ResourceClaimTemplate not seen yet (the job waits for it),
    else a count known only once allocated (the job must state spec.slotsPerWorker). `message` says which."""

    message: str
    waiting: bool


def claim_template_names(pod_template: JSON) -> list[str]:
    """The ResourceClaimTemplates a pod template's claims are made from (what the informer is asked for)."""
    claims = (pod_template.get("spec") or {}).get("resourceClaims") or []
    return [str(c["resourceClaimTemplateName"]) for c in claims if c.get("resourceClaimTemplateName")]


def job_claim_template_names(job: MPIJob) -> set[str]:
    return {n for replica in job.spec.mpi_replica_specs.values() for n in claim_template_names(replica.template)}


def _alternative_gpus(request: JSON, classes: frozenset[str]) -> int | str:
    """GPUs of one `exactly` request or `firstAvailable` alternative, or why they are known only once allocated."""
    if request.get("deviceClassName") not in classes or request.get("adminAccess"):
        return 0
    if request.get("allocationMode") == "All":
        return f"All devices of class {request.get('deviceClassName')}"
    return int(request.get("count") or 1)  # the apiserver's schema: an integer, at least 1


def _request_gpus(request: JSON, classes: frozenset[str]) -> int | str:
    if request.get("exactly") is not None:
        return _alternative_gpus(request["exactly"], classes)
    counts = [_alternative_gpus(a, classes) for a in request.get("firstAvailable") or []]
    unknown = next((c for c in counts if isinstance(c, str)), None)
    if unknown is not None:
        return f"{unknown} (one of its firstAvailable alternatives)"
    if len(set(counts)) > 1:
        return (f"one of firstAvailable alternatives giving {', '.join(map(str, sorted(set(counts))))} GPUs, which "
                "one known only once allocated")
    return counts[0] if counts else 0


def claimed_gpus(pod_template: JSON, templates: Mapping[str, JSON] | None, classes: frozenset[str],
                 where: str = "the pod template") -> int | Unresolved:
    """The GPU devices the containers' per-pod claims request from `classes`, read from their ResourceClaimTemplates
    (`templates`, by name, in the job's namespace; None: not watched)."""
    spec = pod_template.get("spec") or {}
    if not classes or not spec.get("resourceClaims"):
        return 0
    made_from = {c.get("name"): c.get("resourceClaimTemplateName") for c in spec["resourceClaims"]}
    used: dict[str, set[str | None]] = {}  # per-pod claim -> its requests the containers use (None: the whole claim)
    for container in spec.get("containers") or []:
        for ref in (container.get("resources") or {}).get("claims") or []:
            if made_from.get(ref.get("name")):  # a shared claim (resourceClaimName) adds no slots
                used.setdefault(ref["name"], set()).add(ref.get("request") or None)
    total = 0
    for claim, requests in sorted(used.items()):
        name = made_from[claim]
        template = templates.get(name) if templates is not None else None
        if template is None:
            seen = ("mpiop does not watch ResourceClaimTemplates (its role lacks list and watch on them, or the "
                    "apiserver does not serve resource.k8s.io/v1)" if templates is None else "not found")
            return Unresolved(f"ResourceClaimTemplate {name} of claim {claim} in {where}: {seen}", waiting=True)
        device_requests = ((template.get("spec") or {}).get("spec") or {}).get("devices", {}).get("requests") or []
        for request in device_requests:
            if None not in requests and request.get("name") not in requests:
                continue
            found = _request_gpus(request, classes)
            if isinstance(found, str):
                return Unresolved(
                    f"spec.slotsPerWorker: must be set: claim {claim} in {where} (ResourceClaimTemplate {name}, "
                    f"request {request.get('name')}) asks for {found}, a count known only once allocated",
                    waiting=False)
            total += found
    return total


# -- slots --------------------------------------------------------------------------------------------------------


def _host_templates(job: MPIJob) -> Iterable[tuple[ReplicaType, JSON]]:
    """The templates whose GPUs give the slots, in order: the Worker's, then with runLauncherAsWorker and no workers
    the Launcher's (the only host)."""
    if (worker := job.spec.worker) is not None:
        yield WORKER, worker.template
    launcher = job.spec.launcher
    if job.spec.run_launcher_as_worker and job.spec.worker_replicas == 0 and launcher is not None:
        yield LAUNCHER, launcher.template


def slots_per_worker(job: MPIJob, templates: Mapping[str, JSON] | None = None,
                     classes: frozenset[str] = frozenset()) -> int | Unresolved:
    """slotsPerWorker, else the hosts' GPUs (limits plus devices claimed from `classes`), else 1."""
    if job.spec.slots_per_worker is not None:
        return job.spec.slots_per_worker
    for replica, template in _host_templates(job):
        claimed = claimed_gpus(template, templates, classes, f"the {replica} template")
        if isinstance(claimed, Unresolved):
            return claimed
        if (gpus := (gpus_per_pod(template, job.spec.gpu_resource) or 0) + claimed) > 0:
            return gpus
    return 1


def limit_slots(job: MPIJob) -> int:
    """The slots without claims: slotsPerWorker, else the hosts' GPU limits, else 1 (no device class: no lookup)."""
    found = slots_per_worker(job)
    return found if isinstance(found, int) else 1


def with_slots(job: MPIJob, slots: int) -> MPIJob:
    """The job as the builders read it (desired.slots, which reads limits only): its slotsPerWorker set to `slots` when
    its claims give them, so the hostfile, discover_hosts.sh, the presets, the launcher's environment and the rank
    map agree. A copy, never written back; any other job is returned as it is."""
    if slots == limit_slots(job):
        return job
    return job.model_copy(update={"spec": job.spec.model_copy(update={"slots_per_worker": slots})})
