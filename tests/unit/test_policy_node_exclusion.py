"""mpiop.policies.node_exclusion and desired.affinity: a node that failed an attempt for its own reason is avoided."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import MPIJob, NodeExclusion
from mpiop.controller import nodes
from mpiop.decide import decide
from mpiop.desired import affinity, pods
from mpiop.desired.settings import Settings
from mpiop.plan import Plan
from mpiop.policies import node_exclusion
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod, observe

CODES = frozenset({74})


def base(excluded: list[str] | None = None, restarts: int = 0) -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(2).condition("Created").condition("Running")
            .status(start_time=at(0), restart_count=restarts or None, excluded_nodes=excluded))


def decided(job: MPIJob, failed: PodBuilder, most: int = 2, attempt: int = 0) -> Plan:
    pods_ = [make_pod(job, "launcher", 0, attempt).ready().on_node("n0"),
             make_pod(job, "worker", 0, attempt).ready().on_node("n1"), failed]
    return decide(job, observe(job, [p.obj() for p in pods_]), at(100),
                  Settings(node_fault_exit_codes=CODES, max_excluded_nodes=most))


@pytest.mark.parametrize(
    ("failed", "why"),
    [
        (make_pod(base().obj(), "worker", 1).failed(exit_code=74).on_node("n2"),
         "exit code 74 (--node-fault-exit-codes)"),
        (make_pod(base().obj(), "worker", 1).evicted().on_node("n2"), "evicted by the kubelet"),
        (make_pod(base().obj(), "worker", 1).running().on_node("n2").disrupted("DeletionByTaintManager", "")
         .terminating(), "DisruptionTarget DeletionByTaintManager"),
        (make_pod(base().obj(), "worker", 1).running().on_node("n2").disrupted("DeletionByPodGC", "").terminating(),
         "DisruptionTarget DeletionByPodGC"),
    ],
    ids=["node-fault-exit-code", "node-pressure-eviction", "not-ready-node", "deleted-node"],
)
def test_a_node_failure_excludes_the_node(failed: PodBuilder, why: str) -> None:
    plan = decided(base().obj(), failed)
    assert plan.status.excluded_nodes == ["n2"]
    told = f"pi-worker-1 failed there ({why})"
    assert plan.status.node_exclusions == [NodeExclusion(node="n2", attempt=0, message=told)]
    excluded = [e for e in plan.events if e.reason == "NodeExcluded"]
    assert [(e.type, e.message) for e in excluded] == [(
        "Warning", f"node n2 is excluded from MPIJob ns/pi's next attempts: pi-worker-1 failed there ({why}); "
                   "excluded: n2")]


@pytest.mark.parametrize(
    "failed",
    [make_pod(base().obj(), "worker", 1).failed(exit_code=1).on_node("n2"),
     make_pod(base().obj(), "worker", 1).failed(exit_code=137, reason="OOMKilled").on_node("n2"),
     make_pod(base().obj(), "worker", 1).running().on_node("n2").disrupted("PreemptionByScheduler").terminating(),
     make_pod(base().obj(), "worker", 1).failed(exit_code=74)],
    ids=["program-error", "oom", "preempted", "no-node"],
)
def test_other_failures_exclude_nothing(failed: PodBuilder) -> None:
    plan = decided(base().obj(), failed)
    assert plan.status.restart_count == 1
    assert plan.status.excluded_nodes is None


def test_the_most_recent_nodes_are_kept_once_each() -> None:
    job = base(["n5", "n2", "n6"]).obj()
    plan = decided(job, make_pod(job, "worker", 1).failed(exit_code=74).on_node("n2"), most=2)
    assert plan.status.excluded_nodes == ["n6", "n2"]
    told = "pi-worker-1 failed there (exit code 74 (--node-fault-exit-codes))"
    assert plan.status.node_exclusions == [NodeExclusion(node="n2", attempt=0, message=told)], \
        "n6 was excluded before mpiop said why"


def test_why_each_node_is_excluded_follows_the_nodes_kept() -> None:
    before = [NodeExclusion(node=n, attempt=i, message=f"m{i}") for i, n in enumerate(["n5", "n2", "n6"])]
    job = base(["n5", "n2", "n6"]).status(node_exclusions=before).obj()
    plan = decided(job, make_pod(job, "worker", 1).failed(exit_code=74).on_node("n2"), most=3)
    assert plan.status.excluded_nodes == ["n5", "n6", "n2"]
    assert [(e.node, e.message) for e in plan.status.node_exclusions or []] == [
        ("n5", "m0"), ("n6", "m2"), ("n2", "pi-worker-1 failed there (exit code 74 (--node-fault-exit-codes))")]


def test_the_annotation_turns_it_off_and_a_bad_value_is_refused() -> None:
    job = base().annotation("mpiop.kubeflow.org/exclude-failed-nodes", "false").obj()
    plan = decided(job, make_pod(job, "worker", 1).failed(exit_code=74).on_node("n2"))
    assert plan.status.restart_count == 1 and plan.status.excluded_nodes is None
    job = base().annotation("mpiop.kubeflow.org/exclude-failed-nodes", "no").obj()
    plan = decide(job, observe(job, []), at(100))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message == ('MPIJob ns/pi has failed: metadata.annotations[mpiop.kubeflow.org/exclude-failed-nodes]: '
                              "'no' is not \"true\" or \"false\"")


def test_unschedulable_pods_of_a_job_with_exclusions_say_why() -> None:
    job = (make_mpijob("pi", "ns").workers(2).condition("Created").condition("Restarting")
           .condition("Running", "False", reason="MPIJobRestarting")
           .status(start_time=at(0), restart_count=1, excluded_nodes=["n1", "n2"]).obj())
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    observed = observe(job, [make_pod(job, "worker", 0, 1).unschedulable(message).obj()])
    running = decide(job, observed, at(100)).status.condition("Running")
    assert running is not None and (running.status, running.reason) == ("False", "ExcludedNodesUnschedulable")
    assert running.message == (
        "MPIJob ns/pi waits: its pods avoid the nodes n1, n2 (an attempt failed there for a node's reason; "
        'annotation mpiop.kubeflow.org/exclude-failed-nodes: "false" turns that off), and the scheduler finds no '
        "other: " + message)


def required_terms(spec: dict[str, Any]) -> list[Any]:
    terms: list[Any] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    return terms


NOT_IN = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1", "n2"]}


def test_the_next_attempts_pods_avoid_the_nodes_with_the_templates_own_affinity() -> None:
    gpu = {"key": "gpu", "operator": "In", "values": ["a100"]}
    zone = {"key": "zone", "operator": "In", "values": ["b"]}
    template_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [gpu]}, {"matchExpressions": [zone]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [zone]}}]}}
    job = base(["n2", "n1"]).pod_spec("Worker", affinity=template_affinity).obj()
    spec = pods.worker_pod(job, 0, 1)["spec"]
    assert required_terms(spec) == [{"matchExpressions": [gpu, NOT_IN]}, {"matchExpressions": [zone, NOT_IN]}]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == (
        template_affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    assert required_terms(pods.launcher_pod(job, 1)["spec"]) == [{"matchExpressions": [NOT_IN]}]


def test_kueue_tas_gate_and_node_selector_stay_beside_the_exclusion() -> None:
    """What Kueue's TAS puts in the template (its scheduling gate, a flavor's nodeSelector) reaches the pod with
    the exclusion beside it: the scheduler needs both, and Kueue's ungater adds the domain's nodeSelector later."""
    gate = [{"name": "kueue.x-k8s.io/topology"}]
    flavor = {"cloud.provider.com/topology-block": "b1"}
    job = base(["n2"]).pod_spec("Worker", nodeSelector=flavor, schedulingGates=gate).obj()
    spec = pods.worker_pod(job, 0, 1)["spec"]
    assert (spec["nodeSelector"], spec["schedulingGates"]) == (flavor, gate)
    assert required_terms(spec) == [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n2"]}]}]


def test_no_exclusion_leaves_the_template_alone() -> None:
    spec: dict[str, Any] = {"containers": []}
    affinity.exclude_nodes(spec, [])
    assert spec == {"containers": []}


def _failing_attempt(job: MPIJob) -> list[PodBuilder]:
    """The launcher failed (mpirun lost worker 1); worker 1's node went away or NotReady, so it looks alive or
    not Ready, but did not fail."""
    return [make_pod(job, "launcher").failed(exit_code=1).on_node("n0"),
            make_pod(job, "worker", 0).ready().on_node("n1"), make_pod(job, "worker", 1).running().on_node("n2")]


def test_the_nodes_of_a_failing_attempt_are_named_for_reading_not_ready_first() -> None:
    job = base(["n9"]).obj()
    observed = observe(job, [p.obj() for p in _failing_attempt(job)])
    plan = decide(job, observed, at(100), Settings(max_excluded_nodes=2))
    assert node_exclusion.nodes_to_check(plan, job, observed, Settings(max_excluded_nodes=2)) == ["n0", "n2", "n1"]
    observed.node_faults["n2"] = "deleted"
    assert node_exclusion.nodes_to_check(plan, job, observed, Settings()) == ["n0", "n1"], "read already"
    off = Settings(max_excluded_nodes=0)
    assert node_exclusion.nodes_to_check(decide(job, observed, at(100), off), job, observed, off) == []
    running = observe(job, [p.obj() for p in _failing_attempt(job)[1:]])
    assert node_exclusion.nodes_to_check(decide(job, running, at(100)), job, running, Settings()) == [], \
        "no attempt fails: nothing is read"


@pytest.mark.parametrize(
    ("faults", "excluded", "message"),
    [({"n2": "deleted"}, ["n2"], "pi-worker-1 ran there (node deleted)"),
     ({"n2": "NotReady (Ready=Unknown, NodeStatusUnknown)"}, ["n2"],
      "pi-worker-1 ran there (node NotReady (Ready=Unknown, NodeStatusUnknown))"),
     ({}, None, None)],
    ids=["deleted", "not-ready", "all-fine"],
)
def test_a_node_found_not_ready_or_deleted_is_excluded(faults: dict[str, str], excluded: list[str] | None,
                                                       message: str | None) -> None:
    job = base().obj()
    observed = observe(job, [p.obj() for p in _failing_attempt(job)])
    observed.node_faults.update(faults)
    plan = decide(job, observed, at(100))
    assert plan.status.restart_count == 1
    assert plan.status.excluded_nodes == excluded
    assert [e.message for e in plan.status.node_exclusions or []] == ([message] if message else [])
    events = [e.message for e in plan.events if e.reason == "NodeExcluded"]
    assert events == ([f"node n2 is excluded from MPIJob ns/pi's next attempts: {message}; excluded: n2"]
                      if message else [])


@pytest.mark.parametrize(
    ("node", "fault"),
    [({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, None),
     ({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}},
      "NotReady (Ready=Unknown, NodeStatusUnknown)"),
     ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "NotReady (Ready=False)"),
     ({"status": {}}, None)],
    ids=["ready", "unknown", "false", "no-condition-yet"],
)
def test_what_makes_a_node_not_ready(node: dict[str, Any], fault: str | None) -> None:
    assert nodes.fault(node) == fault
