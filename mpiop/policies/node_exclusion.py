"""Node exclusion: an attempt that failed for its node's reason is not retried on that node.

A GPU throwing Xid errors or a flapping NIC fails the next attempt the same way until backoffLimit is spent.
When the pod blamed for a failed attempt was evicted for node pressure (the kubelet's TerminationByKubelet, or
reason Evicted), deleted off a NotReady node by the taint manager (DeletionByTaintManager) or off a deleted node
by the pod GC (DeletionByPodGC), or exited with a code the operator is told means a node fault
(--node-fault-exit-codes), its node joins status.excludedNodes (the most recent --max-excluded-nodes), and every
later pod gets a required `kubernetes.io/hostname NotIn` (desired/affinity). If that leaves no node to run on,
Running=False says so instead of the pods waiting silently. Annotation
mpiop.kubeflow.org/exclude-failed-nodes: "false" turns it off for a job.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from mpiop.policies.failure import mark_failed
from mpiop.status import conditions as c

ANNOTATION = "mpiop.kubeflow.org/exclude-failed-nodes"
NODE_DISRUPTIONS = frozenset({"TerminationByKubelet", "DeletionByTaintManager", "DeletionByPodGC"})
NODE_EXCLUDED_REASON = "NodeExcluded"
WAITING_REASON = "ExcludedNodesUnschedulable"


def refuse_bad_annotation(plan: Plan, job: MPIJob, now: dt.datetime) -> bool:
    """A value other than "true" or "false" fails the job, naming the annotation (a typo must not silently
    leave a job on the node that fails it)."""
    value = job.metadata.annotations.get(ANNOTATION)
    if value is None or value in ("true", "false"):
        return False
    mark_failed(plan, c.VALIDATION_ERROR_REASON,
                f"MPIJob {job.key} has failed: metadata.annotations[{ANNOTATION}]: {value[:100]!r} is not "
                '"true" or "false"', now)
    return True


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


def apply(plan: Plan, job: MPIJob, observed: Observed, settings: Settings) -> None:
    """Exclude the node of the pod blamed for an attempt this plan failed, if it failed for the node's reason."""
    failure = plan.status.last_failure
    if (job.metadata.annotations.get(ANNOTATION) == "false" or settings.max_excluded_nodes < 1 or failure is None
            or failure == job.status.last_failure or not failure.pod or not failure.node):
        return
    pod = observed.pod(failure.pod)
    why = node_fault(pod, settings.node_fault_exit_codes) if pod is not None else None
    if why is None:
        return
    nodes = [n for n in plan.status.excluded_nodes or [] if n != failure.node] + [failure.node]
    plan.status.excluded_nodes = nodes[-settings.max_excluded_nodes:]
    plan.event("Warning", NODE_EXCLUDED_REASON, f"node {failure.node} is excluded from MPIJob {job.key}'s next "
               f"attempts: {failure.pod} failed there ({why}); excluded: {', '.join(plan.status.excluded_nodes)}")


def explain_wait(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    """Running=False saying the exclusions are why, while a pod of the attempt cannot be scheduled."""
    excluded = plan.status.excluded_nodes
    if not excluded:
        return
    attempt = plan.status.restart_count or 0
    unschedulable = next((m for p in observed.pods_of_attempt(attempt) if (m := podstate.unschedulable_message(p))),
                         "")
    if not unschedulable or plan.status.is_true("Running"):
        return
    c.set_condition(plan.status, "Running", "False", WAITING_REASON,
                    f"MPIJob {job.key} waits: its pods avoid the nodes {', '.join(excluded)} (an attempt failed there "
                    f"for a node's reason; annotation {ANNOTATION}: \"false\" turns that off), and the scheduler "
                    f"finds no other: {unschedulable}", now)
