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
from collections.abc import Iterator

import pytest

from devcluster.coscheduler import DEFAULT_SCHEDULER_NAME
from devcluster.simulated import SimulatedCluster
from mpiop.api.raw import JSON
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.client import KubeClient
from testkit.gangs import (
    all_pods,
    gpu_job,
    lift_gates_alternately,
    loser_waits_then_runs,
    new_namespace,
    running_false,
    two_jobs_without_gangs,
    winner_and_loser,
)
from testkit.operator import eventually, running_operator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=2, coscheduler=DEFAULT_SCHEDULER_NAME, coscheduler_permit_wait_seconds=5) as cluster:
        yield cluster


async def test_without_gang_scheduling_two_jobs_deadlock(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    async with new_namespace(sim_kube, "gang-off") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns) as operator:
        await two_jobs_without_gangs(cluster, operator)


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

        winner, loser = await winner_and_loser(cluster)
        why = await eventually(lambda: running_false(cluster, loser), 30, f"{loser} saying why it waits")
        print(f"\nwith the coscheduler: {winner} runs whole; {loser}: {why['reason']}: {why['message']}")
        assert why["reason"] == "PodGroupUnschedulable"
        assert f"PodGroup {loser} (minMember 5, minResources nvidia.com/gpu=16)" in why["message"]
        after = await loser_waits_then_runs(cluster, winner, loser)
        print(f"{loser} Running {after:.1f}s after {winner} succeeded")


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
