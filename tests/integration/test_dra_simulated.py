"""GPUs through DRA on the simulated cluster: the pinned kube-scheduler allocates ResourceClaims against the
ResourceSlices this module publishes for its KWOK nodes (no driver runs; DynamicResourceAllocation is GA and on by
default, its scheduler plugin in the default profile), KWOK runs the pods, and mpiop's slots follow the
claims. A NoExecute device taint (KEP-5055, DRADeviceTaints: GA in v1.37) on a worker's GPU makes
kube-controller-manager's device-taint-eviction-controller evict it: a disruption, not a failure against
backoffLimit, and the next attempt avoids its node. A job asking `nvidia.com/gpu` of nodes that have none, whose
DeviceClass provides it from DRA devices (KEP-5004, DRAExtendedResource: GA in v1.37), keeps its slots from the limit.
Jobs asking MIG devices or Intel GPUs (extended resources the test adds to the nodes) get their slots from the
limit, and a claim the workers share (`resourceClaimName`) adds none to those of their own claims.

Own cluster of 4 fake nodes with no nvidia.com/gpu in their capacity, 8 GPUs each in a ResourceSlice, on v1.37's
defaults: no feature gate and no extra API version (on v1.34 both features were alpha and the eviction controller
waited for a v1alpha3 DeviceTaintRule informer; docs/kubernetes-1.37.md §2.2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
    KubeClient,
)
from mpiop.kube.client import NODES as NODE_OBJECTS
from testkit.dra import (
    allocated_devices,
    claim_template,
    device_class,
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


async def test_a_no_execute_device_taint_restarts_the_job_off_its_node_without_spending_backoff_limit(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    cluster = Cluster(sim_kube, "default")
    job = make_mpijob("dt").workers(2).claim("gpus", TEMPLATE).run_policy(backoffLimit=0).manifest()
    names = ["dt-launcher", "dt-worker-0", "dt-worker-1"]
    bad = ""
    async with operator(simulated):
        await cluster.create_job(job)
        try:
            first = await eventually(lambda: running(cluster, names), 90, "attempt 1 Running")
            bad = first["dt-worker-1"]["spec"]["nodeName"]
            device = (await devices_by_pod(cluster))["dt-worker-1"][3].rsplit("/", 1)[1]
            print(f"\nattempt 1: { {n: p['spec']['nodeName'] for n, p in first.items()} }; tainting {device} on {bad}")
            # KWOK removes a deleted pod at once; a kubelet would take the pod's grace period to stop it, and
            # mpiop sees it terminating with its DisruptionTarget meanwhile. The finalizer stands for that.
            await sim_kube.patch(PODS, cluster.ns, "dt-worker-1", {"metadata": {"finalizers": [HOLD]}})
            index = int(device.split("-")[1])
            await sim_kube.patch(RESOURCE_SLICES, None, f"{bad}-{DRIVER}", [
                {"op": "add", "path": f"/spec/devices/{index}/taints", "value": [TAINT]}], patch_type="json")

            async def restarted() -> JSON | None:
                status = ((await cluster.job("dt")) or {}).get("status") or {}
                return status if status.get("restartCount") == 1 else None

            status = await eventually(restarted, 90, "dt restarted")
            evicted = await cluster.pod("dt-worker-1")
            assert evicted is not None
            print("dt-worker-1's conditions:", [c for c in evicted["status"]["conditions"]
                                                if c["type"] == "DisruptionTarget"])
            await sim_kube.patch(PODS, cluster.ns, "dt-worker-1", {"metadata": {"finalizers": None}})
            print("excludedNodes:", status.get("excludedNodes"), "disruptionRestarts:",
                  status.get("disruptionRestarts"), "lastFailure:", status.get("lastFailure"))
            assert (status.get("excludedNodes"), status.get("disruptionRestarts")) == ([bad], 1)
            print("nodeExclusions:", status.get("nodeExclusions"))
            assert [(e["node"], e.get("devices")) for e in status.get("nodeExclusions") or []] == [
                (bad, [{"driver": DRIVER, "pool": bad, "device": device,
                        "taints": ["example.com/unhealthy=true:NoExecute"]}])]
            assert not any(c["type"] == "Failed" and c["status"] == "True" for c in status["conditions"])
            events = await sim_kube.list(EVENTS, cluster.ns, fieldSelector="reason=NodeExcluded,involvedObject.name=dt")
            told = [e["message"] for e in events["items"]]
            print("NodeExcluded:", told)
            assert len(told) == 1 and (f"dt-worker-1 failed there (DisruptionTarget DeletionByDeviceTaintManager: "
                                       f"device {device} of driver {DRIVER} tainted example.com/unhealthy=true:"
                                       "NoExecute)") in told[0]

            second = await eventually(lambda: running(cluster, ["dt-launcher-1", "dt-worker-0", "dt-worker-1"], 1),
                                      90, "attempt 2 Running")
            placed = {n: p["spec"]["nodeName"] for n, p in second.items()}
            print("attempt 2:", placed)
            assert bad not in placed.values()
        finally:
            if bad:  # its devices untainted again (a merge patch replaces the list)
                await sim_kube.patch(RESOURCE_SLICES, None, f"{bad}-{DRIVER}",
                                     {"spec": {"devices": node_gpus(DRIVER, bad)["spec"]["devices"]}})
            await delete_and_wait(cluster, "dt")


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
