"""Node exclusion on the simulated cluster (KWOK nodes, the real kube-scheduler): a worker that fails on a node
with a --node-fault-exit-codes code sends every pod of the next attempt to other nodes; once the exclusions
leave too few nodes, the job says it waits for that reason. A worker's node that went NotReady, or was deleted,
when the attempt failed (the launcher failing first, as mpirun does when it loses a worker) is excluded too. Under
gang scheduling (Kubernetes' own: the stock kube-scheduler with GenericWorkload on, scheduling.k8s.io/v1beta1
PodGroups) the next attempt's gang is placed whole off the excluded node.

Own cluster of 3 fake 8-GPU nodes; each worker asks for 8 GPUs, so a node holds one worker and the two workers
of an attempt need two nodes: after one exclusion they just fit, after two they cannot.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devcluster.simulated import EXIT_CODE_ANNOTATION, FINISH_LABEL, KWOK_NODE_ANNOTATION, SimulatedCluster
from mpiop.controller.caches import pod_group_resource
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.client import MPIJOBS, NODES, PODS, KubeClient
from testkit.operator import Cluster, eventually, mpijob, running_operator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
NODE_FAULT = 74


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=3, feature_gates={"GenericWorkload": True},
                          runtime_config=("scheduling.k8s.io/v1beta1=true",)) as cluster:
        yield cluster


async def _status(cluster: Cluster, name: str) -> dict[str, Any]:
    job = await cluster.job(name)
    return dict((job or {}).get("status") or {})


async def _placed(cluster: Cluster, attempt: int, launcher: str, job: str = "nx") -> dict[str, str] | None:
    """pod -> node of the attempt's three pods, once all are Running."""
    pods = await cluster.pods()
    wanted = [launcher, f"{job}-worker-0", f"{job}-worker-1"]
    if not all(n in pods and pods[n]["metadata"]["labels"].get("mpiop.kubeflow.org/attempt") == str(attempt)
               and pods[n].get("status", {}).get("phase") == "Running" for n in wanted):
        return None
    return {n: pods[n]["spec"]["nodeName"] for n in wanted}


async def _fail_on_its_node(sim_kube: KubeClient, cluster: Cluster, pod: str, restarts: int, job: str = "nx") -> None:
    """KWOK's finish Stage ends the pod's containers with the node-fault exit code."""
    await sim_kube.patch(PODS, cluster.ns, pod, {"metadata": {
        "annotations": {EXIT_CODE_ANNOTATION: str(NODE_FAULT)}, "labels": {FINISH_LABEL: "Failed"}}})

    async def restarted() -> bool:
        return (await _status(cluster, job)).get("restartCount") == restarts

    await eventually(restarted, 60, f"restart {restarts}")


async def test_a_gang_restarts_whole_off_the_faulty_node(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """The scheduler's GangScheduling plugin places the next attempt's gang (launcher and both 8-GPU workers) on
    the two other nodes: a PodGroup of its own (`<job>-<attempt>`), the pods carry the exclusion."""
    cluster = Cluster(sim_kube, "default")
    gang = GangScheduler("kubernetes")
    async with running_operator(str(simulated.kubeconfig), "default", gang_scheduler=gang,
                                node_fault_exit_codes=frozenset({NODE_FAULT})):
        await cluster.create_job(mpijob("gx", workers=2, gpus=8, run_policy={"backoffLimit": 5}))
        try:
            first = await eventually(lambda: _placed(cluster, 0, "gx-launcher", "gx"), 60, "attempt 1 Running")
            group = await sim_kube.get(pod_group_resource(gang), cluster.ns, "gx-0")
            print("\ngang attempt 1:", first, f"(PodGroup gx-0: {group['spec']})")
            bad = first["gx-worker-1"]
            await _fail_on_its_node(sim_kube, cluster, "gx-worker-1", 1, "gx")
            second = await eventually(lambda: _placed(cluster, 1, "gx-launcher-1", "gx"), 60, "attempt 2 Running")
            print("gang attempt 2:", second, f"(excluded: {bad})")
            assert bad not in second.values(), f"attempt 2 ran on the excluded node {bad}"
            assert len({second["gx-worker-0"], second["gx-worker-1"]}) == 2
            pods = await cluster.pods()
            assert {pods[n]["spec"]["schedulingGroup"]["podGroupName"] for n in second} == {"gx-1"}
            assert {pods[n]["spec"]["schedulerName"] for n in second} == {"default-scheduler"}
            await sim_kube.get(pod_group_resource(gang), cluster.ns, "gx-1")
        finally:
            await sim_kube.delete_if_present(MPIJOBS, cluster.ns, "gx")

            async def gx_gone() -> bool:
                return not any(n.startswith("gx-") for n in await cluster.pods())

            await eventually(gx_gone, 60, "gx's pods gone")


async def test_a_node_fault_moves_the_next_attempt_off_the_node(simulated: SimulatedCluster,
                                                                 sim_kube: KubeClient) -> None:
    cluster = Cluster(sim_kube, "default")
    async with running_operator(str(simulated.kubeconfig), "default",
                                node_fault_exit_codes=frozenset({NODE_FAULT})):
        await cluster.create_job(mpijob("nx", workers=2, gpus=8, run_policy={"backoffLimit": 5}))
        first = await eventually(lambda: _placed(cluster, 0, "nx-launcher"), 60, "attempt 1 Running")
        print("\nattempt 1:", first)
        bad = first["nx-worker-1"]
        await _fail_on_its_node(sim_kube, cluster, "nx-worker-1", 1)
        assert (await _status(cluster, "nx"))["excludedNodes"] == [bad]

        second = await eventually(lambda: _placed(cluster, 1, "nx-launcher-1"), 60, "attempt 2 Running")
        print("attempt 2:", second, f"(excluded: {bad})")
        assert bad not in second.values(), f"attempt 2 ran on the excluded node {bad}"
        describe = simulated.kubectl("describe", "mpijob", "nx", "-n", cluster.ns)
        print(describe)
        assert "Excluded Nodes:" in describe and bad in describe.split("Excluded Nodes:")[1].split("\n")[1]
        assert "NodeExcluded" in describe

        # A second node fault: two excluded nodes of three leave one node for two 8-GPU workers.
        worse = second["nx-worker-0"]
        await _fail_on_its_node(sim_kube, cluster, "nx-worker-0", 2)
        assert (await _status(cluster, "nx"))["excludedNodes"] == [bad, worse]

        async def waiting() -> dict[str, Any] | None:
            for condition in (await _status(cluster, "nx")).get("conditions") or []:
                if condition["type"] == "Running" and condition["reason"] == "ExcludedNodesUnschedulable":
                    return dict(condition)
            return None

        condition = await eventually(waiting, 60, "the waiting condition")
        print("attempt 3:", {n: p["spec"].get("nodeName") for n, p in (await cluster.pods()).items()
                             if p["metadata"]["labels"].get("mpiop.kubeflow.org/attempt") == "2"})
        print("Running=False:", condition["message"])
        assert condition["status"] == "False"
        assert f"avoid the nodes {bad}, {worse}" in condition["message"]
        wide = simulated.kubectl("get", "mpijob", "nx", "-n", cluster.ns, "-o", "wide")
        print(wide)
        assert "EXCLUDED NODES" in wide and bad in wide


async def _launcher_fails(sim_kube: KubeClient, cluster: Cluster, launcher: str, restarts: int) -> None:
    """mpirun exits 1 after losing a worker; no worker failed (nor has a log here to name it)."""
    await sim_kube.patch(PODS, cluster.ns, launcher, {"metadata": {"labels": {FINISH_LABEL: "Failed"}}})

    async def restarted() -> bool:
        return (await _status(cluster, "nr")).get("restartCount") == restarts

    await eventually(restarted, 60, f"restart {restarts}")


async def test_a_not_ready_or_deleted_node_is_excluded(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    cluster = Cluster(sim_kube, "default")
    await sim_kube.delete_if_present(MPIJOBS, cluster.ns, "nx")  # its waiting pods would take a node

    async def nx_gone() -> bool:
        return not any(n.startswith("nx-") for n in await cluster.pods())

    await eventually(nx_gone, 60, "the first test's job gone")
    async with running_operator(str(simulated.kubeconfig), "default"):
        await cluster.create_job(mpijob("nr", workers=2, gpus=8, run_policy={"backoffLimit": 5}))
        first = await eventually(lambda: _placed(cluster, 0, "nr-launcher", "nr"), 60, "attempt 1 Running")
        print("\nattempt 1:", first)
        silent = first["nr-worker-1"]
        # Its kubelet stops: KWOK no longer manages it, and its Ready condition says so.
        await sim_kube.patch(NODES, None, silent, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: None}}})
        await sim_kube.patch(NODES, None, silent, {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "kubelet stopped"}]}},
            subresource="status")
        await _launcher_fails(sim_kube, cluster, "nr-launcher", 1)
        assert (await _status(cluster, "nr"))["excludedNodes"] == [silent]

        second = await eventually(lambda: _placed(cluster, 1, "nr-launcher-1", "nr"), 60, "attempt 2 Running")
        print("attempt 2:", second, f"(excluded: {silent})")
        assert silent not in second.values()
        # The deleted node must not be the launcher's: KWOK could not fail a launcher on a node that is gone,
        # and the pod GC takes 40-60 s to delete it, past this test's wait.
        gone = next(second[w] for w in ("nr-worker-0", "nr-worker-1") if second[w] != second["nr-launcher-1"])
        await sim_kube.delete(NODES, None, gone)
        await _launcher_fails(sim_kube, cluster, "nr-launcher-1", 2)
        assert (await _status(cluster, "nr"))["excludedNodes"] == [silent, gone]
        events = simulated.kubectl("get", "events", "-n", cluster.ns, "--field-selector",
                                   "reason=NodeExcluded,involvedObject.name=nr", "-o",
                                   "custom-columns=MESSAGE:.message", "--no-headers")
        print(events)
        assert "nr-worker-1 ran there (node NotReady (Ready=False, KubeletNotReady))" in events
        # The pod GC may delete the worker off the deleted node first (DeletionByPodGC): excluded either way.
        assert f"node {gone} is excluded" in events and ("(node deleted)" in events or "DeletionByPodGC" in events)
