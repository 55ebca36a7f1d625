"""Disruptions through the real apiserver: an evicted worker restarts the job without spending backoffLimit
(kubeflow #647), past --max-disruption-restarts one counts, and once Failed no pod is left running.

The test plays the kubelet: it binds pods to a Node object, evicts one through the Eviction API (which puts
DisruptionTarget on it and deletes it gracefully, so it stays terminating until its kubelet would finish it),
and fails one the way a kubelet evicting for node pressure does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devcluster.controlplane import ControlPlane
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.kube.client import PODS
from testkit.operator import Cluster, eventually, mpijob, running_operator, start_pods


@pytest.fixture
async def node(cluster: Cluster) -> AsyncIterator[str]:
    """A Node object for pods to be bound to (no kubelet behind it)."""
    async with cluster.bare_node() as name:
        yield name


async def _status(cluster: Cluster, name: str) -> JSON:
    job = await cluster.job(name)
    assert job is not None
    status: JSON = job.get("status") or {}
    return status


async def _phases(cluster: Cluster) -> dict[str, str]:
    return {name: str(pod.get("status", {}).get("phase")) for name, pod in (await cluster.pods()).items()}


async def test_evictions_restart_without_spending_backoff_limit_and_leave_no_pod(
        control_plane: ControlPlane, cluster: Cluster, node: str) -> None:
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, max_disruption_restarts=1):
        await cluster.create_job(mpijob("ev", workers=2, run_policy={
            "backoffLimit": 0, "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 8}))
        await start_pods(cluster, "ev", 2, nodes={"ev-worker-0": node, "ev-worker-1": node})

        # 1. The Eviction API: DisruptionTarget, then a graceful deletion the (absent) kubelet would finish.
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": "ev-worker-1", "namespace": cluster.ns}}
        await cluster.kube.request("POST", PODS.path(cluster.ns, "ev-worker-1", "eviction"), body=eviction)
        evicted = await cluster.pod("ev-worker-1")
        assert evicted is not None and evicted["metadata"].get("deletionTimestamp")
        assert [c["reason"] for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"] == [
            "EvictionByEvictionAPI"]
        restarting = await eventually(lambda: cluster.condition("ev", "Restarting"), what="Restarting")
        print("Restarting:", restarting["message"])
        assert restarting["message"].startswith(
            f"MPIJob {cluster.ns}/ev is restarting after a disruption (restart 1, disruption 1; not counted against "
            f"backoffLimit 0): ev-worker-1 (rank 1, node {node}) DisruptionTarget EvictionByEvictionAPI")
        status = await _status(cluster, "ev")
        assert (status["restartCount"], status["disruptionRestarts"]) == (1, 1)
        assert status["lastFailure"]["reason"] == "EvictionByEvictionAPI"
        assert await cluster.condition("ev", "Failed") is None
        await _finish_terminating(cluster, {"ev-worker-0", "ev-worker-1"})

        # 2. Past the cap (1): a kubelet's node-pressure eviction counts against backoffLimit 0, and fails the job.
        second = ["ev-launcher-1", "ev-worker-0", "ev-worker-1"]
        await eventually(lambda: _of_attempt(cluster, second, 1), what="attempt 1's pods")
        await cluster.run_all(second)
        await cluster.kube.patch(PODS, cluster.ns, "ev-worker-0", {"status": {
            "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": "The node was low on resource: memory."}]}}, subresource="status")
        failed = await eventually(lambda: cluster.condition("ev", "Failed"), what="Failed")
        print("Failed:", failed["message"])
        assert "ev-worker-0 (rank 0) DisruptionTarget TerminationByKubelet" in failed["message"]
        assert "(past --max-disruption-restarts 1: counted as a failure)" in failed["message"]
        status = await _status(cluster, "ev")
        assert (status["restartCount"], status["disruptionRestarts"]) == (1, 1)

        # 3. cleanPodPolicy Running: nothing left Pending or Running (the evicted, Failed worker stays); then TTL.
        async def nothing_running() -> dict[str, str] | None:
            phases = await _phases(cluster)
            return phases if not any(p in ("Pending", "Running") for p in phases.values()) else None

        left = await eventually(nothing_running, what="no pod Pending or Running")
        print("pods left under cleanPodPolicy Running:", left)
        assert left == {"ev-worker-0": "Failed"}

        async def job_and_pods_gone() -> bool:
            return await cluster.job("ev") is None and not await cluster.pods()

        await eventually(job_and_pods_gone, timeout=60, what="TTL: the job and (garbage collector) its pods gone")


async def _finish_terminating(cluster: Cluster, bound: set[str]) -> None:
    """The kubelet's part of a graceful deletion of the pods bound to the node: they go once terminating."""
    async def all_terminating() -> bool:
        pods = await cluster.pods()
        return all(pods[n]["metadata"].get("deletionTimestamp") for n in bound if n in pods)

    await eventually(all_terminating, what=f"{sorted(bound)} being deleted")
    for name in bound:
        await cluster.kube.delete(PODS, cluster.ns, name, grace_period_seconds=0)


async def _of_attempt(cluster: Cluster, wanted: list[str], attempt: int) -> bool:
    pods = await cluster.pods()
    return all(n in pods and pods[n]["metadata"]["labels"].get(names.ATTEMPT_LABEL) == str(attempt)
               and not pods[n]["metadata"].get("deletionTimestamp") for n in wanted)

