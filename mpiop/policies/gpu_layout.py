"""Total-GPU mode (spec.gpus): lay a job out on the node shapes its Worker template may run on, before any pod.

The MPI operator proposal's simple mode: the user states the total, mpiop chooses workers x GPUs per worker and
writes them into the job as an ordinary v2beta1 job (Worker.replicas, the first worker container's GPU limit,
slotsPerWorker if unset, and annotation names.GPU_LAYOUT_ANNOTATION recording the request and the choice), so
kubectl, Kueue and every later pass see what runs. The choice, in order:

    the total fits one node           -> 1 worker with every GPU
    a node size divides the total     -> workers of whole nodes (the largest such size the nodes can hold)
    a size of >= 2 divides both the total and a node's GPUs -> the largest (fewest workers; no stranded GPUs)
    otherwise                         -> no layout: the job waits, Running=False naming the shapes seen and why

So 12 GPUs on 8-GPU nodes run as 3 x 4 (one node whole, half of another), not 2 x 6 (2 GPUs stranded on each
of two nodes); 64 as 8 x 8; a prime total larger than any node waits. Only nodes the Worker template may use
count: schedulable, its nodeSelector and simple required node affinity matched, its NoSchedule/NoExecute taints
tolerated (policies/node_fit, in work bounded by --gpu-layout-max-entries). What the job says names no node, label
or taint value (its owner may not read nodes): the nodes left out are counted by size and reason, and the
controller logs them by name. A layout is chosen once, while the job has no pod and never ran; it is never changed
after.

Through DRA (spec.gpuDeviceClassName), a node's GPUs are the devices of that DeviceClass its ResourceSlices publish
(policies/dra_inventory), and the layout is written as the Worker template's claim `gpus` made from template
`<job>-gpus` (desired.gpu_claims, which the controller makes before any pod) instead of a limit.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import WORKER, MPIJob
from mpiop.desired import gpu_claims
from mpiop.desired.gpus import layout_resource
from mpiop.plan import MESSAGE_LIMIT, Event, MPIJobPatch, Observed, Plan
from mpiop.policies import dra_inventory, node_fit
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c

WAITING = "GPULayoutUnavailable"
LAID_OUT = "GPULayout"
AT_ADMISSION = ", at admission"  # the end of the record of a job laid out by the admission webhook


@dataclass(frozen=True)
class Layout:
    workers: int
    gpus_per_worker: int

    def __str__(self) -> str:
        return f"{self.workers} worker{'s' if self.workers != 1 else ''} x {self.gpus_per_worker} GPUs"


def lay_out(total: int, node_gpus: Iterable[int]) -> Layout | str:
    """The layout of `total` GPUs on nodes with these GPU counts, or why there is none."""
    sizes = sorted((n for n in node_gpus if n > 0), reverse=True)
    if not sizes:
        return "no node has any"
    if total <= sizes[0]:
        return Layout(1, total)

    def holds(per_worker: int) -> bool:
        return sum(n // per_worker for n in sizes) * per_worker >= total

    for node_size in sorted(set(sizes), reverse=True):  # whole nodes
        if total % node_size == 0 and holds(node_size):
            return Layout(total // node_size, node_size)
    parts = [g for g in range(sizes[0], 1, -1)
             if total % g == 0 and any(n % g == 0 for n in sizes) and holds(g)]
    if parts:
        return Layout(total // parts[0], parts[0])
    if sum(sizes) < total:
        return f"they have {sum(sizes)} in all, fewer than {total}"
    return (f"no worker size of 2 GPUs or more divides both {total} and a node's GPUs, and {total} is larger "
            "than any node")


# -- the nodes ----------------------------------------------------------------------------------------------


def gpus_of(node: JSON, resource: str) -> int:
    try:
        return int(str(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)))
    except ValueError:
        return 0


def _shapes(counts: Counter[int], resource: str) -> str:
    return ", ".join(f"{n} node{'s' if n != 1 else ''} with {gpus} {resource}" for gpus, n in sorted(counts.items()))


@dataclass(frozen=True)
class Dra:
    """What a layout through DRA reads besides the nodes: the cached ResourceSlices (trimmed) and DeviceClasses (by
    name, trimmed); None: not watched."""

    slices: list[JSON] | None = None
    classes: Mapping[str, JSON] | None = None


NOT_WATCHED_DRA = ("spec.gpuDeviceClassName: mpiop does not watch ResourceSlices and DeviceClasses (resource.k8s.io/v1 "
                   "not served, its role lacks list and watch on them, or it runs with --no-gpu-layout or an empty "
                   "--gpu-device-classes)")


def counting(job: MPIJob, dra: Dra | None) -> tuple[str, Callable[[JSON], int]] | str:
    """What the job's layout counts on a node (its name in messages, and the count), or why it cannot count."""
    name = job.spec.gpu_device_class_name
    if name is None:
        resource = layout_resource(job)
        return resource, lambda node: gpus_of(node, resource)
    if dra is None or dra.slices is None or dra.classes is None:
        return NOT_WATCHED_DRA
    if (device_class := dra.classes.get(name)) is None:
        return f"spec.gpuDeviceClassName: DeviceClass {name} not found"
    selected = dra_inventory.cached_class(device_class)
    if isinstance(selected, str):
        return selected
    counts = dra_inventory.node_devices(dra.slices, selected)
    return f"{name} devices", lambda node: counts.get(node["metadata"]["name"], 0)


# -- the job ------------------------------------------------------------------------------------------------


def _pod_spec(job: MPIJob) -> JSON:
    worker = job.spec.worker
    return (worker.template.get("spec") or {}) if worker is not None else {}


def needs_layout(job: MPIJob) -> bool:
    """spec.gpus set and not laid out yet: the first worker container has no limit of the GPU resource (the CRD
    allows spec.gpus with Worker.replicas and that limit both set, agreeing, or neither)."""
    if job.spec.gpus is None or job.spec.worker is None:
        return False
    if job.spec.gpu_device_class_name is not None:  # through DRA: laid out once the Worker template has the claim
        return gpu_claims.worker_claim(job) is None
    containers = _pod_spec(job).get("containers") or []
    limits = ((containers[0].get("resources") or {}).get("limits") or {}) if containers else {}
    return layout_resource(job) not in limits


def layout_patch(job: MPIJob, layout: Layout, record: str) -> JSON:
    """A merge patch writing the layout into the job: Worker.replicas, the first worker container's GPU limit (the
    containers list whole: a merge patch replaces lists), slotsPerWorker if unset, and the annotation. Through DRA,
    instead of the limit: the pod's claim gpu_claims.CLAIM made from the job's template, used by the first container
    (those lists whole too)."""
    containers = json.loads(json.dumps(_pod_spec(job).get("containers") or []))
    resources = containers[0].setdefault("resources", {})
    template: JSON = {"containers": containers}
    if job.spec.gpu_device_class_name is not None:
        resources["claims"] = [*(resources.get("claims") or []), {"name": gpu_claims.CLAIM}]
        template["resourceClaims"] = [*(_pod_spec(job).get("resourceClaims") or []),
                                      {"name": gpu_claims.CLAIM,
                                       "resourceClaimTemplateName": gpu_claims.template_name(job)}]
    else:
        resource = layout_resource(job)
        resources.setdefault("limits", {})[resource] = str(layout.gpus_per_worker)
        if resource in (resources.get("requests") or {}):  # extended resources: a request must equal the limit
            resources["requests"][resource] = str(layout.gpus_per_worker)
    spec: JSON = {"mpiReplicaSpecs": {WORKER: {"replicas": layout.workers, "template": {"spec": template}}}}
    if job.spec.slots_per_worker is None:
        spec["slotsPerWorker"] = layout.gpus_per_worker
    return {"metadata": {"annotations": {names.GPU_LAYOUT_ANNOTATION: record}}, "spec": spec}


def pending(plan: Plan, job: MPIJob, observed: Observed) -> bool:
    """Whether the job is still to be laid out: not laid out, no pod, never started (the layout never changes
    under pods that exist or ran)."""
    return needs_layout(job) and not observed.pods and plan.status.start_time is None


def _judged(job: MPIJob, nodes: Iterable[JSON], count: Callable[[JSON], int]
            ) -> Iterator[tuple[JSON, int, node_fit.Unfit | None]]:
    """Each node with GPUs the job counts, their count, and why the Worker template may not run there."""
    fit = node_fit.Fit(_pod_spec(job))
    for node in nodes:
        gpus = count(node)
        if gpus > 0:
            yield node, gpus, fit.why_not(node)


def _left_out(left_out: Counter[tuple[int, str]], resource: str) -> str:
    """The nodes left out by size and reason, counted: e.g. `3 nodes with 8 nvidia.com/gpu (2 taint not
    tolerated, 1 cordoned)`. No node's name, label or taint: the job's owner may not read nodes."""
    by_size: dict[int, Counter[str]] = {}
    for (gpus, kind), count in left_out.items():
        by_size.setdefault(gpus, Counter())[kind] += count
    return ", ".join(
        f"{sum(kinds.values())} node{'s' if sum(kinds.values()) != 1 else ''} with {gpus} {resource} ("
        + ", ".join(f"{kinds[kind]} {kind}" for kind in node_fit.REASONS if kind in kinds) + ")"
        for gpus, kinds in sorted(by_size.items()))


def over_limit(job: MPIJob, max_entries: int) -> node_fit.OverLimit | None:
    """The field of the Worker template with more entries than the layout matches (--gpu-layout-max-entries)."""
    return node_fit.over_limit(_pod_spec(job), max_entries)


def choose(job: MPIJob, nodes: Iterable[JSON], max_entries: int, dra: Dra | None = None) -> tuple[Layout, str] | str:
    """The job's layout on these nodes and its record (the annotation's text), or why none fits. A Worker template
    with more than `max_entries` tolerations, nodeSelector or node affinity entries is not matched at all. `dra`:
    the devices a job through DRA counts."""
    total = job.spec.gpus or 0
    over = over_limit(job, max_entries)
    if over is not None:
        yours = ("the Worker template's claim gpus" if job.spec.gpu_device_class_name is not None else
                 f"the first worker container's {layout_resource(job)} limit")
        return f"{over}; shorten it, or lay the job out yourself (Worker.replicas and {yours})"
    counted = counting(job, dra)
    if isinstance(counted, str):
        return counted
    resource, count = counted
    eligible: Counter[int] = Counter()
    left_out: Counter[tuple[int, str]] = Counter()
    for _, gpus, why in _judged(job, nodes, count):
        if why is None:
            eligible[gpus] += 1
        else:
            left_out[(gpus, why.kind)] += 1
    chosen = lay_out(total, eligible.elements())
    if isinstance(chosen, str):
        seen = _shapes(eligible, resource) if eligible else (
            f"no node with {resource}" if job.spec.gpu_device_class_name is not None else
            f"no node with allocatable {resource}")
        left = f"; left out: {_left_out(left_out, resource)}" if left_out else ""
        return (f"no layout of {total} {resource} fits the nodes the Worker template may run on "
                f"({seen}{left}): {chosen}")
    slots = job.spec.slots_per_worker if job.spec.slots_per_worker is not None else chosen.gpus_per_worker
    return chosen, f"{total} {resource} as {chosen} (slotsPerWorker {slots}), on nodes: {_shapes(eligible, resource)}"


def left_out_nodes(job: MPIJob, nodes: Iterable[JSON], max_entries: int, most: int = 20,
                   dra: Dra | None = None) -> list[str]:
    """The first `most` GPU nodes the Worker template may not run on, by name, with the taint or key that keeps it
    off: for the operator's log, which an admin reads (the job's condition only counts them)."""
    counted = counting(job, dra)
    if over_limit(job, max_entries) is not None or isinstance(counted, str):
        return []
    resource, count = counted
    named = (f"{node['metadata']['name']} ({gpus} {resource}): {why.detail}"
             for node, gpus, why in _judged(job, nodes, count) if why is not None)
    return list(itertools.islice(named, most))


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, max_entries: int) -> Outcome:
    """STOP while the job waits to be laid out (or is being laid out): nothing else is made in this pass.
    A job laid out at admission (serving/layout_webhook) gets its Event on its first pass. `max_entries`:
    --gpu-layout-max-entries (policies/node_fit)."""
    if not pending(plan, job, observed):
        record = job.metadata.annotations.get(names.GPU_LAYOUT_ANNOTATION, "")
        if record.endswith(AT_ADMISSION) and job.status.condition("Created") is None:
            plan.event("Normal", LAID_OUT, f"laid out {record}"[:MESSAGE_LIMIT])
        return CONTINUE
    if observed.nodes is None:
        return _wait(plan, job, now, "mpiop does not watch nodes (it runs with --no-gpu-layout, or its role does not "
                                     "grant list and watch on nodes, as a namespaced Role cannot): set "
                                     "Worker.replicas and the GPU limit instead")
    chosen = choose(job, observed.nodes, max_entries, Dra(observed.resource_slices, observed.device_classes))
    if isinstance(chosen, str):
        return _wait(plan, job, now, chosen)
    layout, record = chosen
    plan.mpijob_patch = MPIJobPatch(layout_patch(job, layout, record[:MESSAGE_LIMIT]),
                                    Event("Normal", LAID_OUT, f"laid out {record}"[:MESSAGE_LIMIT]))
    running = plan.status.condition("Running")
    if running is not None and running.reason == WAITING:
        c.set_condition(plan.status, "Running", "False", LAID_OUT, f"MPIJob {job.key} laid out: {record}"[
            :MESSAGE_LIMIT], now)
    return STOP


def _wait(plan: Plan, job: MPIJob, now: dt.datetime, why: str) -> Outcome:
    message = f"MPIJob {job.key} waits: {why}"[:MESSAGE_LIMIT]
    running = plan.status.condition("Running")
    c.set_condition(plan.status, "Running", "False", WAITING, message, now)
    if running is None or running.reason != WAITING or running.message != message:
        plan.event("Warning", WAITING, message)
    return STOP
