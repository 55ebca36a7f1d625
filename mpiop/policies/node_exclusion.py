"""Node exclusion: an attempt that failed for its node's reason is not retried on that node.

A GPU throwing Xid errors or a flapping NIC fails the next attempt the same way until backoffLimit is spent. When
the pod blamed for a failed attempt was evicted for node pressure (the kubelet's TerminationByKubelet, or reason
Evicted), deleted off a NotReady node by the taint manager (DeletionByTaintManager) or off a deleted node by the
pod GC (DeletionByPodGC), deleted for a NoExecute taint on one of its DRA devices by the device taint manager
(DeletionByDeviceTaintManager: a faulty GPU is its node's fault for the next attempt), or exited with a code the
operator is told means a node fault (--node-fault-exit-codes), its node joins status.excludedNodes (the most recent
--max-excluded-nodes), and every later pod gets a required `kubernetes.io/hostname NotIn` (desired/affinity). So
does the node of any of the attempt's pods that is NotReady or deleted when the attempt fails: mpiop watches no
Node (at 10,000 nodes an informer would hold them all for a rare failure), so `nodes_to_check` names the few to
read (the blamed pod's first, then failed or not Ready pods'), the controller GETs them and decides again with
`Observed.node_faults`; the taint manager and the pod GC only act minutes later. If that leaves no node to run on,
Running=False says so instead of the pods waiting silently. The device taint manager's condition message names no
device: `device_to_check` names the pod whose devices to read, the controller lists its ResourceClaims and its
node's ResourceSlices and `tainted_devices` says which allocated device is tainted how (`Observed.device_faults`),
for the NodeExcluded Event and status.nodeExclusions (why each excluded node is). Annotation
mpiop.kubeflow.org/exclude-failed-nodes: "false" turns it off for a job.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import FailureInfo, MPIJob, NodeExclusion, TaintedDevice
from mpiop.desired.settings import Settings
from mpiop.plan import DeviceFault, Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid

DEVICE_TAINT_EVICTION = "DeletionByDeviceTaintManager"  # kube-controller-manager's device-taint-eviction-controller
NODE_DISRUPTIONS = frozenset({"TerminationByKubelet", "DeletionByTaintManager", "DeletionByPodGC",
                              DEVICE_TAINT_EVICTION})
NODE_EXCLUDED_REASON = "NodeExcluded"
MAX_NODE_CHECKS = 32  # node GETs when an attempt fails
MAX_TAINTED_DEVICES = 8  # devices named per excluded node (a node's slices may taint hundreds: the status stays small)
MAX_TAINTS_TOLD = 4  # taints named per device (the status stays small: v1.37 allows 16 on a device, v1.34 allowed 4)
WAITING_REASON = "ExcludedNodesUnschedulable"


def refuse_bad_annotation(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """A value other than "true" or "false" fails the job (STOP), naming the annotation (a typo must not silently
    leave a job on the node that fails it)."""
    value = job.metadata.annotations.get(names.EXCLUDE_FAILED_NODES_ANNOTATION)
    if value is None or value in ("true", "false"):
        return CONTINUE
    fail_invalid(plan, job.key, f"metadata.annotations[{names.EXCLUDE_FAILED_NODES_ANNOTATION}]: {value[:100]!r} "
                 'is not "true" or "false"', now)
    return STOP


def node_fault(pod: podstate.Pod, fault_exit_codes: frozenset[int]) -> str | None:
    """Why the pod's failure is its node's (e.g. `DisruptionTarget DeletionByTaintManager`), or None."""
    disruption = podstate.disruption(pod)
    if disruption is not None and disruption[0] in NODE_DISRUPTIONS:
        return f"DisruptionTarget {disruption[0]}"
    if pod.get("status", {}).get("reason") == "Evicted":
        return "evicted by the kubelet"
    code = podstate.exit_code(pod)
    if code is not None and code in fault_exit_codes:
        return f"exit code {code} (--node-fault-exit-codes)"
    return None


def _new_failure(plan: Plan, job: MPIJob, settings: Settings) -> FailureInfo | None:
    """The failure this plan records, if new and nodes may be excluded for it."""
    failure = plan.status.last_failure
    if (job.metadata.annotations.get(names.EXCLUDE_FAILED_NODES_ANNOTATION) == "false"
            or settings.max_excluded_nodes < 1 or failure is None or failure == job.status.last_failure):
        return None
    return failure


def _attempt_pods(plan: Plan, observed: Observed, failure: FailureInfo) -> list[podstate.Pod]:
    """The failed attempt's pods on a node: the blamed one first, then failed or not Ready ones, then the rest."""
    attempt = failure.attempt if failure.attempt is not None else plan.status.attempt
    pods = [p for p in observed.pods_of_attempt(attempt) if podstate.node_name(p)]
    return sorted(pods, key=lambda p: (podstate.name(p) != failure.pod, podstate.is_ready(p)))


def nodes_to_check(plan: Plan, job: MPIJob, observed: Observed, settings: Settings) -> list[str]:
    """The nodes of an attempt this plan fails whose state is to be read (at most MAX_NODE_CHECKS, not yet read
    or excluded) before the plan stands; none when nothing fails here or exclusion is off."""
    failure = _new_failure(plan, job, settings)
    if failure is None:
        return []
    skip = set(observed.node_faults) | set(plan.status.excluded_nodes or [])
    nodes: list[str] = []
    for pod in _attempt_pods(plan, observed, failure):
        node = podstate.node_name(pod)
        if node and node not in skip and node not in nodes:
            nodes.append(node)
    return nodes[:MAX_NODE_CHECKS]


@dataclass(frozen=True)
class DeviceCheck:
    """A pod the device taint manager evicted: whose ResourceClaims (owned by its uid) and node's slices to read."""

    pod: str
    uid: str
    node: str


def device_to_check(plan: Plan, job: MPIJob, observed: Observed, settings: Settings) -> DeviceCheck | None:
    """The pod blamed for the attempt this plan fails, when a device taint evicted it and its devices are unread."""
    failure = _new_failure(plan, job, settings)
    if failure is None or failure.reason != DEVICE_TAINT_EVICTION or not failure.pod or not failure.node \
            or failure.pod in observed.device_faults or (pod := observed.pod(failure.pod)) is None:
        return None
    return DeviceCheck(failure.pod, podstate.uid(pod), failure.node)


def _rule_taint(rule: JSON, device: tuple[str, str, str]) -> str | None:
    """`key=value:NoExecute (DeviceTaintRule <name>)` when the rule taints this (driver, pool, device) NoExecute: each
    field its deviceSelector sets must match; a rule with no deviceSelector matches no device (v1.37.1, #141998)."""
    spec = rule.get("spec") or {}
    selector, taint = spec.get("deviceSelector"), spec.get("taint") or {}
    if not isinstance(selector, dict) or taint.get("effect") != "NoExecute":
        return None
    if any(selector.get(field) not in (None, value) for field, value in zip(("driver", "pool", "device"), device,
                                                                               strict=True)):
        return None
    name = (rule.get("metadata") or {}).get("name")  # admin-written, a valid object name
    return f"{_taint(taint)} (DeviceTaintRule {name})"


def _taint(taint: JSON) -> str:
    return f"{taint.get('key')}{'=' + taint['value'] if taint.get('value') else ''}:{taint.get('effect')}"


def _taints(device: JSON) -> list[str]:
    """`key=value:NoExecute` of each NoExecute taint on a slice's device."""
    return [_taint(t) for t in device.get("taints") or [] if t.get("effect") == "NoExecute"]


def tainted_devices(claims: list[JSON], slices: list[JSON], rules: list[JSON] | None = None) -> DeviceFault | None:
    """Each device allocated to `claims` that a slice of `slices` or a DeviceTaintRule of `rules` taints NoExecute;
    the claims gone (the pod went first) or none matching, every NoExecute-tainted device of the slices (the
    node's), `on_node`; None when no taint is seen (one removed since)."""
    tainted: dict[tuple[str, str, str], list[str]] = {}
    published: list[tuple[str, str, str]] = []
    for found in slices:
        spec = found.get("spec") or {}
        pool = str((spec.get("pool") or {}).get("name"))
        for device in spec.get("devices") or []:
            published.append(key := (str(spec.get("driver")), pool, str(device.get("name"))))
            if taints := _taints(device):
                tainted[key] = taints
    allocated = [(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                 for claim in claims
                 for r in ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                           or [])]
    for rule in rules or []:
        for key in dict.fromkeys([*allocated, *published]):
            if (told := _rule_taint(rule, key)) is not None:
                tainted.setdefault(key, []).append(told)
    mine = [d for d in dict.fromkeys(allocated) if d in tainted]
    keys = mine or list(tainted)
    if not keys:
        return None
    devices = (TaintedDevice(driver=driver, pool=pool, device=device,
                             taints=tainted[(driver, pool, device)][:MAX_TAINTS_TOLD])
               for driver, pool, device in keys[:MAX_TAINTED_DEVICES])
    return DeviceFault(tuple(devices), on_node=not mine, more=max(0, len(keys) - MAX_TAINTED_DEVICES))


def apply(plan: Plan, job: MPIJob, observed: Observed, settings: Settings) -> Outcome:
    """Exclude the node of the pod blamed for an attempt this plan failed, if it failed for the node's reason,
    and the node of any of the attempt's pods that was found NotReady or deleted."""
    failure = _new_failure(plan, job, settings)
    if failure is None:
        return CONTINUE
    faults: dict[str, NodeExclusion] = {}  # node -> what happened there
    blamed = observed.pod(failure.pod) if failure.pod and failure.node else None
    why = node_fault(blamed, settings.node_fault_exit_codes) if blamed is not None else None
    if why is not None and failure.node:
        device = observed.device_faults.get(failure.pod or "")
        told = f": {device.describe()}" if device is not None else ""
        faults[failure.node] = NodeExclusion(
            node=failure.node, message=f"{failure.pod} failed there ({why}{told})", attempt=failure.attempt,
            devices=list(device.devices) if device is not None else None,
            on_node=True if device is not None and device.on_node else None)
    for pod in _attempt_pods(plan, observed, failure):
        node = podstate.node_name(pod)
        if node and node in observed.node_faults and node not in faults:
            faults[node] = NodeExclusion(node=node, attempt=failure.attempt,
                                         message=f"{podstate.name(pod)} ran there (node {observed.node_faults[node]})")
    for node, exclusion in faults.items():
        nodes = [n for n in plan.status.excluded_nodes or [] if n != node] + [node]
        plan.status.excluded_nodes = nodes[-settings.max_excluded_nodes:]
        why_excluded = {e.node: e for e in plan.status.node_exclusions or []} | {node: exclusion}
        plan.status.node_exclusions = [why_excluded[n] for n in plan.status.excluded_nodes if n in why_excluded]
        plan.event("Warning", NODE_EXCLUDED_REASON, f"node {node} is excluded from MPIJob {job.key}'s next "
                   f"attempts: {exclusion.message}; excluded: {', '.join(plan.status.excluded_nodes)}")
    return CONTINUE


def explain_wait(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    """Running=False saying the exclusions are why, while a pod of the attempt cannot be scheduled."""
    excluded = plan.status.excluded_nodes
    if not excluded:
        return
    attempt = plan.status.attempt
    unschedulable = next((m for p in observed.pods_of_attempt(attempt) if (m := podstate.unschedulable_message(p))),
                         "")
    if not unschedulable or plan.status.is_true("Running"):
        return
    c.set_condition(plan.status, "Running", "False", WAITING_REASON,
                    f"MPIJob {job.key} waits: its pods avoid the nodes {', '.join(excluded)} (an attempt failed there "
                    f"for a node's reason; annotation {names.EXCLUDE_FAILED_NODES_ANNOTATION}: \"false\" turns that "
                    f"off), and the scheduler finds no other: {unschedulable}", now)
