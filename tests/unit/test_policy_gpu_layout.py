"""mpiop.policies.gpu_layout: a job stating its total GPUs (spec.gpus) is laid out on the node shapes its Worker
template may run on (whole nodes first, the same GPUs per worker, fewest workers), before any pod; where nothing
fits, it waits saying which shapes it saw and why, and never guesses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.desired.podgroup import gang_scheduler
from mpiop.desired.settings import Settings
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.plan import Observed, Plan
from mpiop.policies.gpu_layout import (
    LAID_OUT,
    WAITING,
    Layout,
    choose,
    lay_out,
    left_out_nodes,
    needs_layout,
)
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.nodes import gpu_node, gpu_nodes, taint
from testkit.pods import make_pod

MIG = "nvidia.com/mig-1g.5gb"
LIMIT = Settings().gpu_layout_max_entries
EIGHTS = [8] * 16  # 128 GPUs
MIXED = [8] * 4 + [4] * 4  # 48 GPUs


@pytest.mark.parametrize(("total", "nodes", "expected"), [
    pytest.param(1, EIGHTS, Layout(1, 1), id="1-on-8s"),
    pytest.param(7, EIGHTS, Layout(1, 7), id="7-on-8s-one-worker"),
    pytest.param(8, EIGHTS, Layout(1, 8), id="8-on-8s-one-whole-node"),
    pytest.param(12, EIGHTS, Layout(3, 4), id="12-on-8s-3x4-not-2x6"),
    pytest.param(20, EIGHTS, Layout(5, 4), id="20-on-8s"),
    pytest.param(64, EIGHTS, Layout(8, 8), id="64-on-8s"),
    pytest.param(128, EIGHTS, Layout(16, 8), id="128-on-8s-every-node"),
    pytest.param(129, EIGHTS, "they have 128 in all, fewer than 129", id="129-on-16x8s-too-few"),
    pytest.param(129, [8] * 32, "no worker size of 2 GPUs or more divides both 129 and a node's GPUs, and 129 is "
                 "larger than any node", id="129-on-32x8s-no-size-fits"),
    pytest.param(13, EIGHTS, "no worker size of 2 GPUs or more divides both 13 and a node's GPUs, and 13 is larger "
                 "than any node", id="prime-over-a-node"),
    pytest.param(6, MIXED, Layout(1, 6), id="mixed-6-fits-an-8"),
    pytest.param(12, MIXED, Layout(3, 4), id="mixed-12-whole-4s"),
    pytest.param(16, MIXED, Layout(2, 8), id="mixed-16-whole-8s"),
    pytest.param(40, MIXED, Layout(10, 4), id="mixed-40-too-many-for-8s-so-4s"),
    pytest.param(48, MIXED, Layout(12, 4), id="mixed-48-every-gpu"),
    pytest.param(64, [8] * 4, "they have 32 in all, fewer than 64", id="more-than-the-cluster"),
    pytest.param(5, [1] * 8, Layout(5, 1), id="one-gpu-nodes-whole"),
    pytest.param(14, [7, 7], Layout(2, 7), id="mig-7-slices-whole"),
    pytest.param(8, [], "no node has any", id="no-gpu-nodes"),
    pytest.param(8, [0, 0], "no node has any", id="zero-gpu-nodes"),
])
def test_layout_table(total: int, nodes: list[int], expected: Layout | str) -> None:
    assert lay_out(total, nodes) == expected


def total(gpus: int, resource: str | None = None) -> MPIJobBuilder:
    return make_mpijob("big", "ns").total_gpus(gpus, resource)


def decided(job: MPIJob, nodes: list[dict[str, object]] | None, pods: list[dict[str, object]] | None = None) -> Plan:
    return decide(job, Observed(pods=list(pods or []), nodes=nodes), at(0))


def waiting_message(plan: Plan) -> str:
    running = plan.status.condition("Running")
    assert running is not None and (running.status, running.reason) == ("False", WAITING)
    assert plan.mpijob_patch is None and not plan.objects_to_create
    assert [(e.type, e.reason, e.message) for e in plan.events if e.reason != "MPIJobCreated"] == [
        ("Warning", WAITING, running.message)]
    return str(running.message)


def test_64_gpus_on_8_gpu_nodes_are_written_into_the_job_as_8_workers_of_8() -> None:
    job = total(64).obj()
    plan = decided(job, gpu_nodes("n", 10, 8))
    assert plan.mpijob_patch is not None
    assert not plan.objects_to_create and not plan.creation_steps.supporting  # nothing before the layout
    record = ("64 nvidia.com/gpu as 8 workers x 8 GPUs (slotsPerWorker 8), on nodes: 10 nodes with 8 nvidia.com/gpu")
    worker = {"replicas": 8, "template": {"spec": {"containers": [
        {"name": "main", "image": job.spec.mpi_replica_specs["Worker"].template["spec"]["containers"][0]["image"],
         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
    assert plan.mpijob_patch.body == {"metadata": {"annotations": {GPU_LAYOUT_ANNOTATION: record}},
                                   "spec": {"slotsPerWorker": 8, "mpiReplicaSpecs": {"Worker": worker}}}
    assert (plan.mpijob_patch.event.type, plan.mpijob_patch.event.reason) == ("Normal", LAID_OUT)
    assert plan.mpijob_patch.event.message == f"laid out {record}"


def test_the_written_layout_makes_an_ordinary_job_that_is_not_laid_out_again() -> None:
    builder = total(12).gpus(4).workers(3).slots(4)
    job = builder.obj()
    assert not needs_layout(job)
    plan = decided(job, [])
    assert plan.mpijob_patch is None and len(plan.creation_steps.workers) == 3


def test_a_users_slots_per_worker_and_gpu_request_are_kept_consistent() -> None:
    job = total(16).slots(1).request("Worker", "nvidia.com/gpu", 1).obj()
    plan = decided(job, gpu_nodes("n", 2, 8))
    assert plan.mpijob_patch is not None
    spec = plan.mpijob_patch.body["spec"]
    assert "slotsPerWorker" not in spec  # the user's choice (e.g. one rank driving a node's GPUs) stands
    resources = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}


def test_mig_resource_names_are_counted_by_their_own_name() -> None:
    nodes = [*gpu_nodes("a100", 2, 7, MIG), *gpu_nodes("h100", 4, 8)]
    plan = decided(total(14, MIG).obj(), nodes)
    assert plan.mpijob_patch is not None
    worker = plan.mpijob_patch.body["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {MIG: "7"}
    assert waiting_message(decided(total(14, "nvidia.com/mig-3g.20gb").obj(), nodes)) == (
        "MPIJob ns/big waits: no layout of 14 nvidia.com/mig-3g.20gb fits the nodes the Worker template may run on "
        "(no node with allocatable nvidia.com/mig-3g.20gb): no node has any")


def test_amd_gpus() -> None:
    plan = decided(total(16, "amd.com/gpu").obj(), gpu_nodes("mi300", 2, 8, "amd.com/gpu"))
    assert plan.mpijob_patch is not None
    assert plan.mpijob_patch.body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_tainted_nodes_not_tolerated_are_left_out_and_counted() -> None:
    nodes = [*gpu_nodes("free", 2, 8), *gpu_nodes("reserved", 6, 8, taints=[taint("dedicated", "infer")])]
    message = waiting_message(decided(total(64).obj(), nodes))
    assert message == (
        "MPIJob ns/big waits: no layout of 64 nvidia.com/gpu fits the nodes the Worker template may run on "
        "(2 nodes with 8 nvidia.com/gpu; left out: 6 nodes with 8 nvidia.com/gpu (6 taint not tolerated)): they have "
        "16 in all, fewer than 64")
    tolerating = total(64).pod_spec("Worker", tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]).obj()
    plan = decided(tolerating, nodes)
    assert plan.mpijob_patch is not None
    assert plan.mpijob_patch.body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 8
    # PreferNoSchedule does not keep a pod off a node.
    soft = gpu_nodes("soft", 8, 8, taints=[taint("gpu-hint", effect="PreferNoSchedule")])
    assert decided(total(64).obj(), soft).mpijob_patch is not None


SECRET_NODES = [gpu_node("rack7-secret-0", 8, labels={"pool": "vision", "zone": "z-hidden"}),
                gpu_node("rack7-secret-1", 8, labels={"pool": "vision", "zone": "z-hidden"},
                         taints=[taint("customer", "acme-corp")]),
                gpu_node("rack7-secret-2", 8, labels={"pool": "speech"}, taints=[taint("customer", "acme-corp")]),
                gpu_node("rack7-secret-3", 4, labels={"pool": "vision", "zone": "z-hidden"}, unschedulable=True),
                gpu_node("rack7-secret-4", 4, labels={"pool": "speech", "zone": "z-other"})]
NEVER_SAID = ("rack7", "secret", "acme", "customer", "hidden", "other", "speech")


@pytest.mark.parametrize(("pod_spec", "left_out"), [
    pytest.param({}, "1 node with 4 nvidia.com/gpu (1 cordoned), 2 nodes with 8 nvidia.com/gpu (2 taint not tolerated)",
                 id="taints-and-cordon"),
    pytest.param({"nodeSelector": {"pool": "vision"}},
                 "2 nodes with 4 nvidia.com/gpu (1 nodeSelector not matched, 1 cordoned), 2 nodes with 8 "
                 "nvidia.com/gpu (1 taint not tolerated, 1 nodeSelector not matched)", id="selector"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}},
                  "tolerations": [{"operator": "Exists"}]},
                 "1 node with 4 nvidia.com/gpu (1 cordoned), 1 node with 8 nvidia.com/gpu (1 required node affinity "
                 "not matched)", id="affinity-tolerating-all"),
])
def test_the_nodes_left_out_are_counted_by_size_and_reason_never_named(pod_spec: dict[str, object],
                                                                         left_out: str) -> None:
    """Running=False (and its Event) is read by the job's owner, who may not read nodes: no node name, label value or
    taint in it, only how many nodes of which size and why; the operator's log names them (left_out_nodes)."""
    message = waiting_message(decided(total(64).pod_spec("Worker", **pod_spec).obj(), SECRET_NODES))
    assert f"; left out: {left_out}):" in message
    assert not [word for word in NEVER_SAID if word in message], message


def test_the_operators_log_names_the_nodes_left_out_and_why() -> None:
    job = total(64).pod_spec("Worker", nodeSelector={"pool": "vision"}).obj()
    assert left_out_nodes(job, SECRET_NODES, LIMIT) == [
        "rack7-secret-1 (8 nvidia.com/gpu): taint customer=acme-corp:NoSchedule not tolerated",
        "rack7-secret-2 (8 nvidia.com/gpu): nodeSelector pool not matched",
        "rack7-secret-3 (4 nvidia.com/gpu): cordoned",
        "rack7-secret-4 (4 nvidia.com/gpu): nodeSelector pool not matched"]
    assert left_out_nodes(job, SECRET_NODES, LIMIT, most=1) == [
        "rack7-secret-1 (8 nvidia.com/gpu): taint customer=acme-corp:NoSchedule not tolerated"]


def terms(count: int, values: int) -> dict[str, object]:
    """Required node affinity of `count` terms of one expression with `values` values each."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": [f"v{i}" for i in range(values)]}]}
        for _ in range(count)]}}}


TEMPLATE = "spec.mpiReplicaSpecs.Worker.template.spec"
AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


@pytest.mark.parametrize(("pod_spec", "over"), [
    pytest.param({"tolerations": [{"key": f"k{i}", "value": "v"} for i in range(20_000)]},
                 f"{TEMPLATE}.tolerations: 20000 entries", id="20000-tolerations"),
    pytest.param({"tolerations": [{"key": f"k{i}", "value": "v"} for i in range(LIMIT + 1)]},
                 f"{TEMPLATE}.tolerations: {LIMIT + 1} entries", id="one-toleration-over"),
    pytest.param({"nodeSelector": {f"k{i}": "v" for i in range(LIMIT + 1)}},
                 f"{TEMPLATE}.nodeSelector: {LIMIT + 1} entries", id="node-selector"),
    # 10 terms + 10 expressions + 10 x 99 values: terms, expressions and values each count.
    pytest.param({"affinity": terms(10, 99)}, f"{TEMPLATE}.{AFFINITY}: more than {LIMIT} entries",
                 id="affinity-values"),
    pytest.param({"affinity": terms(LIMIT // 2 + 1, 0)}, f"{TEMPLATE}.{AFFINITY}: more than {LIMIT} entries",
                 id="affinity-terms"),
    pytest.param({"tolerations": [*({"key": f"k{i}", "value": "v"} for i in range(LIMIT - 1)),
                                  {"key": "dedicated", "operator": "Exists"}],
                  "affinity": terms(10, 98), "nodeSelector": {f"k{i}": "v" for i in range(LIMIT - 1)} | {"pool": "a"}},
                 None, id="at-the-limit"),
])
def test_a_template_over_the_limit_waits_naming_the_field_and_the_limit(pod_spec: dict[str, object],
                                                                          over: str | None) -> None:
    nodes = gpu_nodes("n", 300, 8, labels={"pool": "a", **{f"k{i}": "v" for i in range(LIMIT - 1)}},
                      taints=[taint("dedicated", "infer")])
    plan = decided(total(16).pod_spec("Worker", **pod_spec).obj(), nodes)
    if over is None:
        assert plan.mpijob_patch is not None, plan.status.conditions
        return
    assert waiting_message(plan) == (
        f"MPIJob ns/big waits: {over}, over the GPU layout's limit of {LIMIT} (the operator's "
        "--gpu-layout-max-entries); shorten it, or lay the job out yourself (Worker.replicas and the first worker "
        "container's nvidia.com/gpu limit)")


class CountedList(list[dict[str, object]]):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self) -> Iterator[dict[str, object]]:
        self.walks += 1
        return super().__iter__()


@pytest.mark.parametrize(("limit", "walks"), [(LIMIT, 0), (20_000, 1)], ids=["over-the-limit", "limit-raised"])
def test_300_tainted_nodes_and_20000_tolerations_walk_them_at_most_once(limit: int, walks: int) -> None:
    """Issue 50's case (nothing fits, so each node event lays the job out again): matched node by node it took a
    second a pass. Over the limit the tolerations are not read at all; under a raised limit, once, into an index."""
    job = total(13).obj()
    tolerations = CountedList({"key": f"k{i}", "operator": "Equal", "value": "v", "effect": "NoSchedule"}
                              for i in range(20_000))
    job.spec.mpi_replica_specs["Worker"].template["spec"]["tolerations"] = tolerations
    nodes = gpu_nodes("n", 300, 8, taints=[taint("dedicated", "infer")])
    chosen = choose(job, nodes, limit)
    assert tolerations.walks == walks
    assert isinstance(chosen, str) and ("over the GPU layout's limit" in chosen) is (walks == 0)


@pytest.mark.parametrize(("pod_spec", "eligible"), [
    pytest.param({}, {"a-0", "b-0", "c-0"}, id="any-schedulable"),
    pytest.param({"nodeSelector": {"pool": "a"}}, {"a-0"}, id="node-selector"),
    pytest.param({"tolerations": [{"operator": "Exists"}]}, {"a-0", "b-0", "c-0", "t-0"}, id="tolerate-all"),
    pytest.param({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, {"a-0", "b-0", "c-0", "t-0"},
                 id="tolerate-key"),
    pytest.param({"tolerations": [{"key": "dedicated", "value": "other"}]}, {"a-0", "b-0", "c-0"},
                 id="wrong-value"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b", "c"]}]}]}}}},
        {"b-0", "c-0"}, id="affinity-in"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]}]},
                              {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b-0"]}]}]}}}},
        {"a-0", "b-0", "c-0"}, id="affinity-terms-ored"),
])
def test_only_nodes_the_worker_template_may_use_count(pod_spec: dict[str, object], eligible: set[str]) -> None:
    nodes = [gpu_node("a-0", 8, labels={"pool": "a"}), gpu_node("b-0", 8, labels={"pool": "b"}),
             gpu_node("c-0", 8, labels={"pool": "c"}), gpu_node("t-0", 8, taints=[taint("dedicated", "infer")]),
             gpu_node("cordoned-0", 8, unschedulable=True)]
    job = total(8 * len(eligible)).pod_spec("Worker", **pod_spec).obj()
    plan = decided(job, nodes)
    assert plan.mpijob_patch is not None, plan.status.conditions
    assert plan.mpijob_patch.body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == len(eligible)
    assert decided(total(8 * len(eligible) + 8).pod_spec("Worker", **pod_spec).obj(), nodes).mpijob_patch is None


def test_no_gpu_nodes_the_job_waits_saying_so() -> None:
    message = waiting_message(decided(total(8).obj(), [gpu_node("fpga", 2, "example.com/fpga")]))
    assert message == ("MPIJob ns/big waits: no layout of 8 nvidia.com/gpu fits the nodes the Worker template may run "
                       "on (no node with allocatable nvidia.com/gpu): no node has any")


def test_without_a_node_informer_the_job_waits_saying_why() -> None:
    assert "--no-gpu-layout" in waiting_message(decided(total(8).obj(), None))


def test_the_same_wait_sends_its_event_once() -> None:
    builder = total(13).condition("Created")
    first = decided(builder.obj(), gpu_nodes("n", 4, 8))
    running = first.status.condition("Running")
    assert running is not None
    again = decided(builder.condition("Running", status="False", reason=WAITING, message=str(running.message)).obj(),
                    gpu_nodes("n", 4, 8))
    assert again.events == [] and again.mpijob_patch is None


def test_a_waiting_job_is_laid_out_when_a_node_fits_and_says_so() -> None:
    waiting = total(13).condition("Created").condition("Running", status="False", reason=WAITING, message="waits")
    plan = decided(waiting.obj(), [*gpu_nodes("n", 4, 8), gpu_node("big", 16)])
    assert plan.mpijob_patch is not None
    running = plan.status.condition("Running")
    assert running is not None and (running.status, running.reason) == ("False", LAID_OUT)
    assert running.message == ("MPIJob ns/big laid out: 13 nvidia.com/gpu as 1 worker x 13 GPUs (slotsPerWorker 13), "
                               "on nodes: 4 nodes with 8 nvidia.com/gpu, 1 node with 16 nvidia.com/gpu")


def test_no_podgroup_is_sized_before_the_layout() -> None:
    """Under --gang-scheduling the PodGroup's minMember and minResources come from the laid-out job."""
    settings = Settings(gang_scheduler=gang_scheduler("volcano"))
    waiting = decide(total(13).obj(), Observed(nodes=gpu_nodes("n", 4, 8)), at(0), settings)
    laying_out = decide(total(16).obj(), Observed(nodes=gpu_nodes("n", 4, 8)), at(0), settings)
    assert waiting.pod_group is None and laying_out.pod_group is None and laying_out.mpijob_patch is not None
    laid_out = decide(total(16).gpus(8).workers(2).obj(), Observed(nodes=gpu_nodes("n", 4, 8)), at(0), settings)
    assert laid_out.pod_group is not None and laid_out.pod_group.verb == "create"


def test_a_suspended_job_is_laid_out_before_it_is_admitted() -> None:
    """Kueue creates jobs suspended; the layout comes first, so the workload it admits has the final pod sets."""
    plan = decided(total(64).run_policy(suspend=True).obj(), gpu_nodes("n", 8, 8))
    assert plan.mpijob_patch is not None


def test_the_layout_never_changes_once_pods_exist_or_the_job_started() -> None:
    job = total(64).obj()
    launcher = make_pod(job, "launcher").running().obj()
    assert decided(job, gpu_nodes("n", 8, 8), [launcher]).mpijob_patch is None
    started = total(64).status(start_time=at(0)).obj()
    assert decided(started, gpu_nodes("n", 8, 8)).mpijob_patch is None


def test_a_v2beta1_job_is_not_touched() -> None:
    plan = decided(make_mpijob("plain", "ns").gpus(8).obj(), [])
    assert plan.mpijob_patch is None and plan.creation_steps.workers
