"""GPUs through DRA on the simulated cluster: the pinned kube-scheduler allocates ResourceClaims against the
ResourceSlices this module publishes for its KWOK nodes (no driver runs; DynamicResourceAllocation is GA and on by
default, its scheduler plugin in the default profile), KWOK runs the pods, and mpiop's slots follow the
claims. A NoExecute device taint (KEP-5055, DRADeviceTaints: GA in v1.37) on a worker's GPU makes
kube-controller-manager's device-taint-eviction-controller evict it: a disruption, not a failure against
backoffLimit, and the next attempt avoids its node. So does a resource.k8s.io/v1 DeviceTaintRule naming the device;
one with no deviceSelector taints no device (v1.37.1). A job asking `nvidia.com/gpu` of nodes that have none, whose
DeviceClass provides it from DRA devices (KEP-5004, DRAExtendedResource: GA in v1.37), keeps its slots from the limit.
Jobs asking MIG devices or Intel GPUs (extended resources the test adds to the nodes) get their slots from the
limit, and a claim the workers share (`resourceClaimName`) adds none to those of their own claims.

Own cluster of 4 fake nodes with no nvidia.com/gpu in their capacity, 8 GPUs each in a ResourceSlice, on v1.37's
defaults: no feature gate and no extra API version (on v1.34 both features were alpha and the eviction controller
waited for a v1alpha3 DeviceTaintRule informer; docs/kubernetes-1.37.md §2.2).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devcluster.simulated import SimulatedCluster
from mpiop.api.raw import JSON
from mpiop.kube.client import (
    CONFIGMAPS,
    DEVICE_CLASSES,
    EVENTS,
    MPIJOBS,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    KubeClient,
)
from mpiop.kube.client import NODES as NODE_OBJECTS
from testkit.dra import (
    DEVICE_TAINT_RULES,
    allocated_devices,
    claim_template,
    device_class,
    device_taint_rule,
    exactly,
    fabric_slice,
    node_gpus,
    request,
    resource_claim,
)
from testkit.mpijobs import make_mpijob
from testkit.operator import Cluster, eventually, mpijob, running_operator
from testkit.pods import env_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
DRIVER = "gpu.example.com"
NODES = [f"kwok-node-{i}" for i in range(4)]
TEMPLATE = "eight-gpus"
HOLD = "sim.mpiop.dev/kubelet"  # a finalizer standing for the kubelet that would take its grace period to stop it
TAINT = {"key": "example.com/unhealthy", "value": "true", "effect": "NoExecute"}


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=len(NODES), gpus_per_node=0) as cluster:
        gpus = device_class(DRIVER)
        gpus["spec"]["extendedResourceName"] = "nvidia.com/gpu"  # KEP-5004: the extended resource from DRA
        objects = [gpus, *(node_gpus(DRIVER, node) for node in NODES),
                   claim_template(TEMPLATE, request("gpus", exactly(DRIVER, 8)), namespace="default")]
        cluster.kubectl("create", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                    "items": objects}))
        yield cluster


def operator(simulated: SimulatedCluster) -> Any:
    return operator_of(simulated, frozenset({DRIVER}))


def operator_of(simulated: SimulatedCluster, gpu_classes: frozenset[str]) -> Any:
    """mpiop on the module's cluster, counting the devices of `gpu_classes` as GPUs."""
    return running_operator(str(simulated.kubeconfig), "default", gpu_device_classes=gpu_classes)


async def hostfile(cluster: Cluster, job: str) -> str | None:
    config = await cluster.kube.get_or_none(CONFIGMAPS, cluster.ns, f"{job}-config")
    return ((config or {}).get("data") or {}).get("hostfile")


async def running(cluster: Cluster, names: list[str], attempt: int = 0) -> dict[str, JSON] | None:
    """The named pods of the attempt, once all are Running."""
    pods = await cluster.pods()
    if all(n in pods and pods[n]["metadata"]["labels"].get("mpiop.kubeflow.org/attempt") == str(attempt)
           and pods[n].get("status", {}).get("phase") == "Running" for n in names):
        return {n: pods[n] for n in names}
    return None


async def devices_by_pod(cluster: Cluster) -> dict[str, list[str]]:
    """pod -> driver/pool/device of each device its ResourceClaims were allocated."""
    found: dict[str, list[str]] = {}
    for claim in (await cluster.kube.list(RESOURCE_CLAIMS, cluster.ns))["items"]:
        for owner in claim["metadata"].get("ownerReferences") or []:
            found.setdefault(owner["name"], []).extend(allocated_devices(claim))
    return found


async def delete_and_wait(cluster: Cluster, job: str) -> None:
    """The job, its pods and their claims gone (the claims' devices free for the next test)."""
    await cluster.kube.delete_if_present(MPIJOBS, cluster.ns, job)

    async def gone() -> bool:
        pods = [n for n in await cluster.pods() if n.startswith(f"{job}-")]
        return not pods and not any(p.startswith(f"{job}-") for p in await devices_by_pod(cluster))

    await eventually(gone, 90, f"{job}'s pods and claims gone")


async def test_four_workers_claiming_8_gpus_each_get_8_slots_and_32_ranks(simulated: SimulatedCluster,
                                                                          sim_kube: KubeClient) -> None:
    cluster = Cluster(sim_kube, "default")
    workers = [f"dra4-worker-{i}" for i in range(4)]
    async with operator(simulated):
        await cluster.create_job(make_mpijob("dra4").workers(4).claim("gpus", TEMPLATE).manifest())
        try:
            pods = await eventually(lambda: running(cluster, ["dra4-launcher", *workers]), 90, "dra4 Running")
            text = await eventually(lambda: hostfile(cluster, "dra4"), what="dra4's hostfile")
            print(f"\nhostfile of dra4:\n{text}", end="")
            assert text.splitlines() == [f"{w}.dra4.default.svc slots=8" for w in workers]
            assert env_of(pods["dra4-worker-3"])["WORLD_SIZE"] == "32"
            devices = await devices_by_pod(cluster)
            for worker in workers:
                node = pods[worker]["spec"]["nodeName"]
                print(f"{worker} on {node}: {devices.get(worker)}")
                assert sorted(devices.get(worker) or []) == sorted(f"{DRIVER}/{node}/gpu-{i}" for i in range(8))
            assert len({pods[w]["spec"]["nodeName"] for w in workers}) == 4
        finally:
            await delete_and_wait(cluster, "dra4")


Taint = Callable[[str, str], Awaitable[None]]  # (node, device): taint that device of the node's pool, or undo it


@dataclass(frozen=True)
class Eviction:
    """A job restarted after one of its worker's devices was tainted NoExecute: that node and device, the job's
    status once restarted and its NodeExcluded Events' messages."""

    node: str
    device: str
    status: JSON
    told: list[str]


async def restarted_off_a_tainted_device(cluster: Cluster, name: str, taint: Taint, untaint: Taint) -> Eviction:
    """Job `name` (2 workers of 8 GPUs, backoffLimit 0) Running, then `taint` one of worker-1's devices: the
    device taint manager evicts the worker, the job restarts once as a disruption (not Failed: backoffLimit 0 is
    not spent), its node excluded, and attempt 2 runs on other nodes. The device untainted and the job gone
    afterwards."""
    launcher, workers = f"{name}-launcher", [f"{name}-worker-0", f"{name}-worker-1"]
    victim = workers[1]
    bad = device = ""
    await cluster.create_job(make_mpijob(name).workers(2).claim("gpus", TEMPLATE).run_policy(backoffLimit=0)
                             .manifest())
    try:
        first = await eventually(lambda: running(cluster, [launcher, *workers]), 90, "attempt 1 Running")
        bad = first[victim]["spec"]["nodeName"]
        device = (await devices_by_pod(cluster))[victim][3].rsplit("/", 1)[1]
        print(f"\nattempt 1: { {n: p['spec']['nodeName'] for n, p in first.items()} }; tainting {device} on {bad}")
        # KWOK removes a deleted pod at once; a kubelet would take the pod's grace period to stop it, and
        # mpiop sees it terminating with its DisruptionTarget meanwhile. The finalizer stands for that.
        await cluster.kube.patch(PODS, cluster.ns, victim, {"metadata": {"finalizers": [HOLD]}})
        await taint(bad, device)

        async def restarted() -> JSON | None:
            status = ((await cluster.job(name)) or {}).get("status") or {}
            return status if status.get("restartCount") == 1 else None

        status = await eventually(restarted, 90, f"{name} restarted")
        evicted = await cluster.pod(victim)
        assert evicted is not None
        print(f"{victim}'s conditions:", [c for c in evicted["status"]["conditions"]
                                          if c["type"] == "DisruptionTarget"])
        await cluster.kube.patch(PODS, cluster.ns, victim, {"metadata": {"finalizers": None}})
        print("excludedNodes:", status.get("excludedNodes"), "disruptionRestarts:",
              status.get("disruptionRestarts"), "lastFailure:", status.get("lastFailure"))
        assert (status.get("excludedNodes"), status.get("disruptionRestarts")) == ([bad], 1)
        print("nodeExclusions:", status.get("nodeExclusions"))
        assert not any(c["type"] == "Failed" and c["status"] == "True" for c in status["conditions"])
        events = await cluster.kube.list(EVENTS, cluster.ns,
                                         fieldSelector=f"reason=NodeExcluded,involvedObject.name={name}")
        told = [e["message"] for e in events["items"]]
        print("NodeExcluded:", told)

        second = await eventually(lambda: running(cluster, [f"{launcher}-1", *workers], 1), 90, "attempt 2 Running")
        placed = {n: p["spec"]["nodeName"] for n, p in second.items()}
        print("attempt 2:", placed)
        assert bad not in placed.values()
        return Eviction(bad, device, status, told)
    finally:
        with contextlib.suppress(ApiError):  # a failure above may leave the evicted pod held
            await cluster.kube.patch(PODS, cluster.ns, victim, {"metadata": {"finalizers": None}})
        if bad:
            await untaint(bad, device)
        await delete_and_wait(cluster, name)


def exclusions(eviction: Eviction) -> list[tuple[str, Any]]:
    return [(e["node"], e.get("devices")) for e in eviction.status.get("nodeExclusions") or []]


async def test_a_no_execute_device_taint_restarts_the_job_off_its_node_without_spending_backoff_limit(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    async def taint(node: str, device: str) -> None:
        await sim_kube.patch(RESOURCE_SLICES, None, f"{node}-{DRIVER}", [
            {"op": "add", "path": f"/spec/devices/{int(device.split('-')[1])}/taints", "value": [TAINT]}],
            patch_type="json")

    async def untaint(node: str, device: str) -> None:  # a merge patch replaces the list
        await sim_kube.patch(RESOURCE_SLICES, None, f"{node}-{DRIVER}",
                             {"spec": {"devices": node_gpus(DRIVER, node)["spec"]["devices"]}})

    async with operator(simulated):
        seen = await restarted_off_a_tainted_device(Cluster(sim_kube, "default"), "dt", taint, untaint)
    assert exclusions(seen) == [(seen.node, [{"driver": DRIVER, "pool": seen.node, "device": seen.device,
                                              "taints": ["example.com/unhealthy=true:NoExecute"]}])]
    assert len(seen.told) == 1 and (f"dt-worker-1 failed there (DisruptionTarget DeletionByDeviceTaintManager: "
                                    f"device {seen.device} of driver {DRIVER} tainted example.com/unhealthy=true:"
                                    "NoExecute)") in seen.told[0]


async def test_a_device_taint_rule_naming_a_workers_device_restarts_the_job_off_its_node(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """The same NoExecute taint through a resource.k8s.io/v1 DeviceTaintRule (GA in v1.37) whose deviceSelector
    names the device (driver, pool, device), the slice untouched. mpiop reads the rules too (controller/devices.py),
    so the exclusion names the device and the rule."""
    resources = json.loads(simulated.kubectl("get", "--raw", f"/apis/{DEVICE_TAINT_RULES.api_version}"))["resources"]
    served = sorted(r["name"] for r in resources if r["name"].startswith("devicetaintrules"))
    print(f"\n{DEVICE_TAINT_RULES.api_version} serves {served}", end="")
    assert served == ["devicetaintrules", "devicetaintrules/status"]
    rule = "dtr-unhealthy"

    async def taint(node: str, device: str) -> None:
        await sim_kube.create(DEVICE_TAINT_RULES, None, device_taint_rule(
            rule, TAINT, {"driver": DRIVER, "pool": node, "device": device}))

    async def untaint(node: str, device: str) -> None:
        found = await sim_kube.get_or_none(DEVICE_TAINT_RULES, None, rule)
        print(f"{rule}'s status:", (found or {}).get("status"))
        await sim_kube.delete_if_present(DEVICE_TAINT_RULES, None, rule)

    async with operator(simulated):
        seen = await restarted_off_a_tainted_device(Cluster(sim_kube, "default"), "dtr", taint, untaint)
    told = f"example.com/unhealthy=true:NoExecute (DeviceTaintRule {rule})"
    assert exclusions(seen) == [(seen.node, [{"driver": DRIVER, "pool": seen.node, "device": seen.device,
                                              "taints": [told]}])]
    assert len(seen.told) == 1 and (f"dtr-worker-1 failed there (DisruptionTarget DeletionByDeviceTaintManager: "
                                    f"device {seen.device} of driver {DRIVER} tainted {told})") in seen.told[0]


async def eviction_condition(kube: KubeClient, rule: str) -> JSON | None:
    """The rule's EvictionInProgress condition, once written for its current generation."""
    found = await kube.get(DEVICE_TAINT_RULES, None, rule)
    return next((c for c in (found.get("status") or {}).get("conditions") or []
                 if c["type"] == "EvictionInProgress"
                 and c.get("observedGeneration") == found["metadata"].get("generation")), None)


async def test_a_device_taint_rule_without_a_device_selector_taints_no_device(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """v1.37.1 (#141998): a DeviceTaintRule with no deviceSelector matches no device. Before, the slices as the
    scheduler sees them (resourceslice/tracker) carried its taint on every device: a NoExecute one left new
    claims unallocatable cluster-wide (`deviceSelector: {}` is how to say every device). The eviction controller
    never matched it (ruleMatchesDevice: nil selector, false, already in v1.36)."""
    cluster = Cluster(sim_kube, "default")
    rule, names = "no-selector", ["ns-launcher", "ns-worker-0", "ns-worker-1"]
    async with operator(simulated):
        await cluster.create_job(make_mpijob("ns").workers(2).claim("gpus", TEMPLATE).manifest())
        try:
            before = await eventually(lambda: running(cluster, names), 90, "ns's pods Running")
            await eventually(lambda: cluster.condition("ns", "Running"), 30, "ns Running")
            await sim_kube.create(DEVICE_TAINT_RULES, None, device_taint_rule(rule, TAINT))
            # The eviction controller writes this condition once for a new rule, having matched it against every
            # allocated claim under the same lock (device_taint_eviction.go: handleRuleChange queues it,
            # maybeUpdateRuleStatus counts): a rule matching ns's devices shows PodsPendingEviction (Completed
            # once they are gone), not NotStarted.
            condition = await eventually(lambda: eviction_condition(sim_kube, rule), 60, f"{rule} processed")
            print(f"\n{rule}'s EvictionInProgress:", condition)
            assert (condition["status"], condition["reason"]) == ("False", "NotStarted")
            # The scheduler: a job made while the rule stands gets the other two nodes' GPUs (claims of devices
            # all tainted NoExecute would leave its workers Pending). Meanwhile ns's pods stay.
            await cluster.create_job(make_mpijob("ns2").workers(2).claim("gpus", TEMPLATE).manifest())
            second = await eventually(lambda: running(cluster, ["ns2-launcher", "ns2-worker-0", "ns2-worker-1"]),
                                      90, "ns2 Running while the rule stands")
            print("ns2:", {n: p["spec"]["nodeName"] for n, p in second.items()})
            after = await running(cluster, names)
            assert after is not None, "ns's pods gone or not Running"
            assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
                n: p["metadata"]["uid"] for n, p in before.items()}
            assert not any(c["type"] == "DisruptionTarget" for p in after.values()
                           for c in p["status"].get("conditions") or [])
            status = ((await cluster.job("ns")) or {}).get("status") or {}
            print("ns: restartCount", status.get("restartCount"), "conditions:",
                  [(c["type"], c["status"]) for c in status.get("conditions") or []])
            assert not status.get("restartCount") and await cluster.condition("ns", "Running") is not None
        finally:
            await sim_kube.delete_if_present(DEVICE_TAINT_RULES, None, rule)
            await delete_and_wait(cluster, "ns")
            await delete_and_wait(cluster, "ns2")


async def test_an_extended_resource_served_from_dra_devices_keeps_slots_from_the_limit(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    cluster = Cluster(sim_kube, "default")
    names = ["xr-launcher", "xr-worker-0", "xr-worker-1"]
    async with operator(simulated):
        await cluster.create_job(mpijob("xr", workers=2, gpus=8))
        try:
            pods = await eventually(lambda: running(cluster, names), 90, "xr Running")
            text = await eventually(lambda: hostfile(cluster, "xr"), what="xr's hostfile")
            print(f"\nhostfile of xr:\n{text}", end="")
            assert text.splitlines() == [f"xr-worker-{i}.xr.default.svc slots=8" for i in range(2)]
            devices = await devices_by_pod(cluster)
            for worker in ("xr-worker-0", "xr-worker-1"):
                node = pods[worker]["spec"]["nodeName"]
                claimed = pods[worker]["status"].get("extendedResourceClaimStatus")
                print(f"{worker} on {node} (no nvidia.com/gpu there): {claimed}; devices {devices.get(worker)}")
                assert claimed is not None and len(devices.get(worker) or []) == 8
        finally:
            await delete_and_wait(cluster, "xr")


async def shows_slots(cluster: Cluster, job: str, slots: int) -> None:
    """The job's launcher and 2 workers Running, and `slots` on each line of its hostfile (printed)."""
    workers = [f"{job}-worker-{i}" for i in range(2)]
    await eventually(lambda: running(cluster, [f"{job}-launcher", *workers]), 90, f"{job} Running")
    text = await eventually(lambda: hostfile(cluster, job), what=f"{job}'s hostfile")
    print(f"\nhostfile of {job}:\n{text}", end="")
    assert text.splitlines() == [f"{w}.{job}.default.svc slots={slots}" for w in workers]


MIG = "nvidia.com/mig-1g.10gb"
INTEL = "gpu.intel.com/i915"
FABRIC = "fabric.example.com"  # a network-attached driver: its one device reachable from every node


async def test_mig_and_intel_limits_give_their_slots_and_a_shared_claim_adds_none(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """Issue 53. The shared claim is of a class the operator counts as GPUs (FABRIC is in --gpu-device-classes):
    were a shared claim's devices counted, `share` would get 9 slots, not 8."""
    cluster = Cluster(sim_kube, "default")
    extra = {MIG: "7", INTEL: "8"}
    jobs = {"mig": (make_mpijob("mig").workers(2).gpus(2, MIG), 2),
            "intel": (make_mpijob("intel").workers(2).gpus(4, INTEL), 4),
            "share": (make_mpijob("share").workers(2).claim("gpus", TEMPLATE).claim("link", shared="link"), 8)}
    for node in NODES:  # KWOK keeps a node's allocatable as written (its stages write conditions only)
        await sim_kube.patch(NODE_OBJECTS, None, node, {"status": {"capacity": extra, "allocatable": extra}},
                             subresource="status")
    await sim_kube.create(DEVICE_CLASSES, None, device_class(FABRIC))
    await sim_kube.create(RESOURCE_SLICES, None, fabric_slice(FABRIC))
    await sim_kube.create(RESOURCE_CLAIMS, cluster.ns,
                          resource_claim("link", request("link", exactly(FABRIC, 1)), namespace=cluster.ns))
    try:
        async with operator_of(simulated, frozenset({DRIVER, FABRIC})):
            for job, _ in jobs.values():
                await cluster.create_job(job.manifest())
            try:
                for name, (_, slots) in jobs.items():
                    await shows_slots(cluster, name, slots)
                link = await sim_kube.get(RESOURCE_CLAIMS, cluster.ns, "link")
                users = sorted(r["name"] for r in link["status"].get("reservedFor") or [])
                print(f"\nclaim link: {allocated_devices(link)} reserved for {users}; "
                      f"own claims: {await devices_by_pod(cluster)}")
                assert allocated_devices(link) == [f"{FABRIC}/fabric/dev-0"] and users == ["share-worker-0",
                                                                                          "share-worker-1"]
            finally:
                for name in jobs:
                    await delete_and_wait(cluster, name)
    finally:
        await sim_kube.delete_if_present(RESOURCE_CLAIMS, cluster.ns, "link")
        await sim_kube.delete_if_present(RESOURCE_SLICES, None, f"fabric-{FABRIC}")
        await sim_kube.delete_if_present(DEVICE_CLASSES, None, FABRIC)
        for node in NODES:
            gone = dict.fromkeys(extra)
            await sim_kube.patch(NODE_OBJECTS, None, node, {"status": {"capacity": gone, "allocatable": gone}},
                                 subresource="status")
