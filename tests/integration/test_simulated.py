"""The simulated-cluster mode (kube-scheduler + KWOK fake GPU nodes) at the smallest scale that proves it.

Own cluster (not the session control plane): 2 fake nodes with 8 GPUs each. A 2-worker MPIJob asking for
4 GPUs per worker is scheduled by the real kube-scheduler onto the fake nodes, KWOK turns its pods Running,
the operator marks it Running; the launcher then finishes through the `mpiop-pod-finish` Stage and the job
Succeeds. A third 5-GPU pod stays Pending: the scheduler counts the fake GPUs. `make bench` uses this at scale.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcluster.simulated import FINISH_LABEL, GPU_RESOURCE, NODE_PREFIX, SimulatedCluster
from mpiop.kube.client import PODS, KubeClient
from testkit.operator import Cluster, eventually, mpijob, running_operator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=2) as cluster:
        yield cluster


async def test_fake_nodes_offer_gpus(sim_kube: KubeClient) -> None:
    nodes = (await sim_kube.request("GET", "/api/v1/nodes"))["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"{NODE_PREFIX}0", f"{NODE_PREFIX}1"]
    for node in nodes:
        assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"


async def test_gpus_are_accounted_by_the_scheduler(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """5 GPUs per pod on two 8-GPU nodes: two pods fit, a third stays Pending (no operator needed)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{
        "name": "main", "image": "x", "resources": {"limits": {GPU_RESOURCE: 5}}}]}}
    for i in range(3):
        await sim_kube.create(PODS, "default", {**pod, "metadata": {"name": f"gpu-{i}"}})

    async def phases() -> list[str] | None:
        listed = await sim_kube.list(PODS, "default")
        found = sorted((p.get("status") or {}).get("phase", "") for p in listed["items"]
                       if p["metadata"]["name"].startswith("gpu-"))
        return found if found.count("Running") == 2 else None

    assert await eventually(phases, 30, "two GPU pods Running") == ["Pending", "Running", "Running"]
    for i in range(3):
        await sim_kube.delete(PODS, "default", f"gpu-{i}", grace_period_seconds=0)

    async def gone() -> bool:
        listed = await sim_kube.list(PODS, "default")
        return not any(p["metadata"]["name"].startswith("gpu-") for p in listed["items"])

    await eventually(gone, 30, "GPU pods deleted")


async def test_a_gpu_job_runs_on_fake_nodes_and_its_launcher_finishes_by_stage(
    simulated: SimulatedCluster, sim_kube: KubeClient
) -> None:
    cluster = Cluster(sim_kube, "default")
    async with running_operator(str(simulated.kubeconfig), "default"):
        await cluster.create_job(mpijob("sim", workers=2, gpus=4))
        await eventually(lambda: cluster.condition("sim", "Running"), 60, "job Running")
        pods = await cluster.pods()
        assert sorted(pods) == ["sim-launcher", "sim-worker-0", "sim-worker-1"]
        assert all(p["spec"]["nodeName"].startswith(NODE_PREFIX) for p in pods.values())
        assert all(p["status"]["phase"] == "Running" for p in pods.values())

        # The launcher finishes on its own once labelled for the mpiop-pod-finish Stage.
        await sim_kube.patch(PODS, cluster.ns, "sim-launcher", {"metadata": {"labels": {FINISH_LABEL: "Succeeded"}}})
        await eventually(lambda: cluster.condition("sim", "Succeeded"), 60, "job Succeeded")
        launcher = await cluster.pod("sim-launcher")
        assert launcher is not None
        assert launcher["status"]["phase"] == "Succeeded"
        assert launcher["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

        # cleanPodPolicy Running: the workers are deleted, and KWOK's pod-delete Stage removes them at once.
        async def only_launcher() -> bool:
            return sorted(await cluster.pods()) == ["sim-launcher"]

        await eventually(only_launcher, 30, "workers deleted")
