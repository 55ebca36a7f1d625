"""Gang scheduling for real: scheduler-plugins' Coscheduling scheduler on a simulated cluster with room for one job.

Two fake nodes with 8 GPUs each (16 GPUs) and two MPIJobs of 4 workers x 4 GPUs (16 GPUs each). The workers'
template holds a scheduling gate that the test lifts worker by worker, alternating between the jobs: the order
in which two jobs submitted at once reach the scheduler, made repeatable.

* Without gang scheduling (the stock kube-scheduler): each job gets 2 of its 4 workers and neither can ever
  run: the deadlock.
* With `--gang-scheduling scheduler-plugins-scheduler` and the real Coscheduling plugin: one job runs whole and
  the other has no pod bound at all, and says why, until the first finishes; then it runs.
* A gang whose minResources cannot fit (5 workers x 4 GPUs): every pod Pending, and the MPIJob says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from devcluster.coscheduler import DEFAULT_SCHEDULER_NAME
from devcluster.simulated import FINISH_LABEL, SimulatedCluster
from mpiop.api.raw import JSON
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.client import PODS, KubeClient
from testkit.namespaces import create_namespace, delete_namespace
from testkit.operator import Cluster, eventually, mpijob, running_operator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GATE = "sim.mpiop.dev/arrival"


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=2, coscheduler=DEFAULT_SCHEDULER_NAME, coscheduler_permit_wait_seconds=5) as cluster:
        yield cluster


@asynccontextmanager
async def new_namespace(kube: KubeClient, name: str) -> AsyncIterator[Cluster]:
    """A namespace for one test, deleted with its pods afterwards: the next test gets every GPU back."""
    try:
        yield Cluster(kube, await create_namespace(kube, name))
    finally:
        await delete_namespace(kube, name, wait=120)


def gpu_job(name: str, workers: int = 4, gated: bool = True) -> JSON:
    job = mpijob(name, workers=workers, gpus=4)
    if gated:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
    return job


def workers(name: str, count: int = 4) -> list[str]:
    return [f"{name}-worker-{i}" for i in range(count)]


async def bound(cluster: Cluster, job: str) -> list[str]:
    """The job's pods a scheduler has bound to a node."""
    return sorted(n for n, p in (await cluster.pods()).items()
                  if n.startswith(f"{job}-") and p["spec"].get("nodeName"))


async def all_pods(cluster: Cluster, count: int) -> bool:
    return len(await cluster.pods()) == count


async def lift_gates_alternately(cluster: Cluster, first: str, second: str, settle: Any = None) -> None:
    """Lift the workers' gates in the order A0 B0 A1 B1 ...; `settle(pod)` waits after each."""
    for a, b in zip(workers(first), workers(second), strict=True):
        for pod in (a, b):
            await cluster.kube.patch(PODS, cluster.ns, pod, {"spec": {"schedulingGates": None}})
            if settle is not None:
                await settle(pod)


async def running_false(cluster: Cluster, name: str) -> JSON | None:
    job = await cluster.job(name)
    return next((c for c in ((job or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == "Running" and c["status"] == "False"), None)


async def test_without_gang_scheduling_two_jobs_deadlock(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    async with new_namespace(sim_kube, "gang-off") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns) as operator:
        await cluster.create_job(gpu_job("a"))
        await cluster.create_job(gpu_job("b"))
        await eventually(lambda: all_pods(cluster, 10), what="both jobs' pods")

        async def placed_or_refused(pod: str) -> bool:
            found = await cluster.pod(pod)
            conditions = ((found or {}).get("status") or {}).get("conditions") or []
            return bool(found and (found["spec"].get("nodeName") or any(
                c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                for c in conditions)))

        await lift_gates_alternately(cluster, "a", "b",
                                     settle=lambda pod: eventually(lambda: placed_or_refused(pod), what=pod))
        await operator.settle()  # nothing changes any more
        placed = {job: await bound(cluster, job) for job in ("a", "b")}
        print(f"\nwithout gang scheduling, bound: {placed}")
        assert placed == {"a": ["a-launcher", "a-worker-0", "a-worker-1"],
                          "b": ["b-launcher", "b-worker-0", "b-worker-1"]}
        assert not await cluster.condition("a", "Running") and not await cluster.condition("b", "Running")


async def test_with_the_coscheduler_one_job_runs_whole_the_other_waits_unbound(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    gang = GangScheduler(DEFAULT_SCHEDULER_NAME)
    async with new_namespace(sim_kube, "gang-on") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=gang):
        await cluster.create_job(gpu_job("a"))
        await cluster.create_job(gpu_job("b"))
        await eventually(lambda: all_pods(cluster, 10), what="both jobs' pods")
        # 0.2 s between lifts paces them, so the two jobs' pods reach the scheduler interleaved: a gang's pods
        # wait in Permit, neither placed nor refused, so there is no state of each pod to wait for.
        await lift_gates_alternately(cluster, "a", "b", settle=lambda pod: asyncio.sleep(0.2))

        async def one_running() -> str | None:
            for job in ("a", "b"):
                if await cluster.condition(job, "Running"):
                    return job
            return None

        winner = await eventually(one_running, 60, "one job Running")
        loser = "b" if winner == "a" else "a"
        assert await bound(cluster, winner) == sorted([f"{winner}-launcher", *workers(winner)])
        why = await eventually(lambda: running_false(cluster, loser), 30, f"{loser} saying why it waits")
        print(f"\nwith the coscheduler: {winner} runs whole; {loser}: {why['reason']}: {why['message']}")
        assert why["reason"] == "PodGroupUnschedulable"
        assert f"PodGroup {loser} (minMember 5, minResources nvidia.com/gpu=16)" in why["message"]
        events = await sim_kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
        assert any(e["reason"] == "PodGroupUnschedulable" and e["involvedObject"]["name"] == loser
                   for e in events["items"])

        # Not a single pod of the other job is bound while the first runs.
        watched_until = time.monotonic() + 5
        while time.monotonic() < watched_until:
            assert await bound(cluster, loser) == []
            await asyncio.sleep(0.25)  # poll interval, through a 5 s window in which nothing may be bound

        finish = {"metadata": {"labels": {FINISH_LABEL: "Succeeded"}}}
        await sim_kube.patch(PODS, cluster.ns, f"{winner}-launcher", finish)
        await eventually(lambda: cluster.condition(winner, "Succeeded"), 60, f"{winner} Succeeded")
        started = time.monotonic()
        await eventually(lambda: cluster.condition(loser, "Running"), 90, f"{loser} Running after {winner}")
        print(f"{loser} Running {time.monotonic() - started:.1f}s after {winner} succeeded")
        assert await bound(cluster, loser) == sorted([f"{loser}-launcher", *workers(loser)])
        assert await running_false(cluster, loser) is None


async def test_a_gang_that_cannot_fit_leaves_every_pod_pending_and_says_why(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    gang = GangScheduler(DEFAULT_SCHEDULER_NAME)
    async with new_namespace(sim_kube, "gang-big") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=gang):
        await cluster.create_job(gpu_job("big", workers=5, gated=False))
        async def says_why() -> JSON | None:
            found = await running_false(cluster, "big")
            return found if found and "resource gap" in found["message"] else None

        why = await eventually(says_why, 60, "the job saying the gang's resources cannot be found")
        pods = await cluster.pods()
        assert len(pods) == 6 and all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
                                      for p in pods.values())
        assert why["reason"] == "PodGroupUnschedulable"
        assert "PodGroup big (minMember 6, minResources nvidia.com/gpu=20)" in why["message"]
        described = simulated.kubectl("describe", "mpijob", "-n", cluster.ns, "big")
        conditions = described[described.index("  Conditions:"):described.index("  Last Reconcile Time:")]
        print(f"\n--- kubectl describe mpijob big (conditions, events) ---\n{conditions}"
              f"{described[described.index('Events:'):]}")
        assert "PodGroupUnschedulable" in conditions and "resource gap" in conditions
