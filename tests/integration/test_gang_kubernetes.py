"""Kubernetes' own gangs for real: the stock v1.37 kube-scheduler (GenericWorkload on: its GangScheduling plugin and
workload-aware preemption) and scheduling.k8s.io/v1beta1 PodGroups on a simulated cluster with room for one job.

Two KWOK nodes with 8 GPUs each (16 GPUs) and two MPIJobs of 4 workers x 4 GPUs (16 GPUs each)
(testkit/gangs.py): the workers' scheduling gates lifted alternately between the jobs.

* Without gang scheduling (the same scheduler, the same cluster): each job gets 2 of its 4 workers, neither runs.
* With `--gang-scheduling kubernetes`: one job runs whole and the other has no pod bound at all, and says why
  (its PodGroup's PodGroupInitiallyScheduled condition), until the first finishes; then it runs.
* A gang that cannot fit (5 workers x 4 GPUs): every pod Pending, none bound, and the MPIJob says why.
* Suspended, the group goes; resumed, the same attempt's group is made anew once the old one is gone.
* WaitForWorkersReady: minCount is the workers, and the launcher made later joins the placed gang.
* deploy/overlays/kubernetes-gang's podgroups rule is exactly what a job's life uses (as test_rbac_gang.py): created,
  patched as Worker.replicas changes, a new one for a new attempt and the old one deleted, deleted when it finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devcluster.simulated import FINISH_LABEL, SimulatedCluster
from mpiop.api.raw import JSON
from mpiop.controller.caches import pod_group_resource
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.client import MPIJOBS, PODS, KubeClient
from testkit.deploy import DEPLOY
from testkit.gangs import (
    PODGROUP_VERBS,
    all_pods,
    bound,
    gpu_job,
    lift_gates_alternately,
    loser_waits_then_runs,
    new_namespace,
    podgroup_requests_check,
    running_false,
    two_jobs_without_gangs,
    winner_and_loser,
)
from testkit.operator import Cluster, eventually, mpijob, running_operator
from testkit.rbac import Request, applied, recorder, service_account_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KUBERNETES = GangScheduler("kubernetes")
POD_GROUPS = pod_group_resource(KUBERNETES)


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=2, feature_gates={"GenericWorkload": True},
                          runtime_config=("scheduling.k8s.io/v1beta1=true",)) as cluster:
        yield cluster


async def pod_group(cluster: Cluster, name: str) -> JSON | None:
    return await cluster.kube.get_or_none(POD_GROUPS, cluster.ns, name)


def shown(group: JSON) -> str:
    """A PodGroup's spec and status as the scheduler left them, for the test's output."""
    return yaml.safe_dump({"metadata": {"name": group["metadata"]["name"],
                                        "finalizers": group["metadata"].get("finalizers")},
                           "spec": group["spec"], "status": group.get("status")}, sort_keys=False)


async def test_without_gang_scheduling_two_jobs_deadlock(simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """The baseline on this very cluster: the gate and API on, but no PodGroup, so no gang."""
    async with new_namespace(sim_kube, "k8s-gang-off") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns) as operator:
        await two_jobs_without_gangs(cluster, operator)


async def test_with_kubernetes_gangs_one_job_runs_whole_the_other_waits_unbound(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    async with new_namespace(sim_kube, "k8s-gang-on") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES):
        started = time.monotonic()
        await cluster.create_job(gpu_job("a"))
        await cluster.create_job(gpu_job("b"))
        await eventually(lambda: all_pods(cluster, 10), what="both jobs' pods")
        for name in ("a", "b"):
            group = await pod_group(cluster, f"{name}-0")
            assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
            assert group["spec"]["disruptionMode"] == {"all": {}}
            assert group["metadata"]["ownerReferences"][0]["name"] == name
            for pod in (await cluster.pods()).values():
                if pod["metadata"]["name"].startswith(f"{name}-"):
                    assert pod["spec"]["schedulingGroup"] == {"podGroupName": f"{name}-0"}
                    assert pod["spec"]["schedulerName"] == "default-scheduler"
        job = await cluster.job("a")
        assert job is not None and all("schedulingGroup" not in r["template"]["spec"]
                                       for r in job["spec"]["mpiReplicaSpecs"].values())
        # Paced: a gang's pods wait in PreEnqueue or Permit, neither placed nor refused.
        await lift_gates_alternately(cluster, "a", "b", settle=lambda pod: asyncio.sleep(0.2))

        winner, loser = await winner_and_loser(cluster)
        print(f"\n{winner} Running {time.monotonic() - started:.1f}s after both jobs were created")
        why = await eventually(lambda: running_false(cluster, loser), 30, f"{loser} saying why it waits")
        print(f"with kubernetes gangs: {winner} runs whole; {loser}: {why['reason']}: {why['message']}")
        assert why["reason"] == "PodGroupUnschedulable"
        assert why["message"].startswith(f"kubernetes has not scheduled PodGroup {loser}-0 (minCount 5): "
                                         "Unschedulable: minCount (5) cannot be satisfied")
        won, lost = await pod_group(cluster, f"{winner}-0"), await pod_group(cluster, f"{loser}-0")
        assert won is not None and lost is not None
        print(f"--- the winner's PodGroup ---\n{shown(won)}--- the loser's PodGroup ---\n{shown(lost)}")
        assert [(c["type"], c["status"], c["reason"]) for c in won["status"]["conditions"]] == [
            ("PodGroupInitiallyScheduled", "True", "Scheduled")]
        after = await loser_waits_then_runs(cluster, winner, loser)
        print(f"{loser} Running {after:.1f}s after {winner} succeeded")
        await eventually(lambda: _gone(cluster, f"{winner}-0"), 60, f"{winner}'s PodGroup deleted once it finished")


async def _gone(cluster: Cluster, name: str) -> bool:
    return await pod_group(cluster, name) is None


async def test_a_gang_that_cannot_fit_binds_none_and_says_why(simulated: SimulatedCluster,
                                                              sim_kube: KubeClient) -> None:
    async with new_namespace(sim_kube, "k8s-gang-big") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES):
        await cluster.create_job(gpu_job("big", workers=5, gated=False))
        why = await eventually(lambda: running_false(cluster, "big"), 60, "the job saying why its gang waits")
        pods = await cluster.pods()
        assert len(pods) == 6 and all(p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
                                      for p in pods.values())
        assert why["reason"] == "PodGroupUnschedulable"
        assert why["message"].startswith("kubernetes has not scheduled PodGroup big-0 (minCount 6): Unschedulable: "
                                         "minCount (6) cannot be satisfied")
        group = await pod_group(cluster, "big-0")
        assert group is not None
        print(f"\n--- PodGroup big-0 ---\n{shown(group)}")
        described = simulated.kubectl("describe", "mpijob", "-n", cluster.ns, "big")
        conditions = described[described.index("  Conditions:"):described.index("  Last Reconcile Time:")]
        print(f"--- kubectl describe mpijob big (conditions, events) ---\n{conditions}"
              f"{described[described.index('Events:'):]}")
        assert "PodGroupUnschedulable" in conditions and "cannot be satisfied" in conditions


async def test_suspended_the_group_goes_and_resumed_a_new_one_is_made_once_it_is_gone(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """The same attempt's group, made anew: its pods would join the old one for good, which its finalizer holds
    until its pods are gone."""
    async with new_namespace(sim_kube, "k8s-gang-suspend") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES):
        await cluster.create_job(mpijob("sus", workers=2))
        await eventually(lambda: cluster.condition("sus", "Running"), 60, "Running")
        first = await pod_group(cluster, "sus-0")
        assert first is not None
        await sim_kube.patch(MPIJOBS, cluster.ns, "sus", {"spec": {"runPolicy": {"suspend": True}}})
        await eventually(lambda: _gone(cluster, "sus-0"), 60, "the PodGroup deleted while suspended")
        assert await cluster.pods() == {}
        await sim_kube.patch(MPIJOBS, cluster.ns, "sus", {"spec": {"runPolicy": {"suspend": False}}})
        await eventually(lambda: cluster.condition("sus", "Running"), 60, "Running again")
        again = await pod_group(cluster, "sus-0")
        assert again is not None and again["metadata"]["uid"] != first["metadata"]["uid"]
        conditions = again["status"]["conditions"]
        assert [(c["type"], c["status"]) for c in conditions] == [("PodGroupInitiallyScheduled", "True")]
        assert await bound(cluster, "sus") == ["sus-launcher", "sus-worker-0", "sus-worker-1"]


async def test_wait_for_workers_ready_the_launcher_joins_a_placed_gang(simulated: SimulatedCluster,
                                                                       sim_kube: KubeClient) -> None:
    """minCount is the workers: the launcher, made once they are Ready, is placed as one more member."""
    async with new_namespace(sim_kube, "k8s-gang-wait") as cluster, \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES):
        await cluster.create_job(mpijob("wait", workers=2, launcherCreationPolicy="WaitForWorkersReady"))
        await eventually(lambda: cluster.condition("wait", "Running"), 60, "Running")
        group = await pod_group(cluster, "wait-0")
        assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        launcher = await cluster.pod("wait-launcher")
        assert launcher is not None and launcher["spec"]["schedulingGroup"] == {"podGroupName": "wait-0"}
        assert await bound(cluster, "wait") == ["wait-launcher", "wait-worker-0", "wait-worker-1"]


async def test_the_overlays_podgroups_rule_is_exactly_what_a_jobs_life_uses(
        simulated: SimulatedCluster, sim_kube: KubeClient, tmp_path: Path) -> None:
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    with applied(simulated.control_plane, DEPLOY / "overlays" / "kubernetes-gang", kinds) as objects:
        kubeconfig = await service_account_kubeconfig(simulated.control_plane, sim_kube, tmp_path / "kubeconfig")
        requests: list[Request] = []
        async with new_namespace(sim_kube, "k8s-gang-rbac") as cluster, \
                running_operator(kubeconfig, cluster.ns, on_request=recorder(requests), gang_scheduler=KUBERNETES):
            await cluster.create_job(mpijob("life", workers=1))
            await eventually(lambda: cluster.condition("life", "Running"), 60, "Running")
            scale = {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}
            await sim_kube.patch(MPIJOBS, cluster.ns, "life", scale)

            async def min_count(want: int) -> bool:
                group = await pod_group(cluster, "life-0")
                return group is not None and group["spec"]["schedulingPolicy"]["gang"]["minCount"] == want

            await eventually(lambda: min_count(3), what="minCount patched to 3")
            await eventually(lambda: cluster.pod("life-worker-1"), what="the second worker")
            await sim_kube.patch(PODS, cluster.ns, "life-launcher", {"metadata": {"labels": {FINISH_LABEL: "Failed"}}})
            await eventually(lambda: pod_group(cluster, "life-1"), 60, "the next attempt's PodGroup")
            await eventually(lambda: _gone(cluster, "life-0"), 60, "the first attempt's PodGroup deleted")
            await eventually(lambda: cluster.condition("life", "Running"), 60, "Running again")
            for pod in (await cluster.pods()).values():
                if pod["metadata"]["labels"].get("mpiop.kubeflow.org/attempt") == "1":
                    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "life-1"}
            await sim_kube.patch(PODS, cluster.ns, "life-launcher-1",
                                 {"metadata": {"labels": {FINISH_LABEL: "Succeeded"}}})
            await eventually(lambda: cluster.condition("life", "Succeeded"), 60, "Succeeded")
            await eventually(lambda: _gone(cluster, "life-1"), 60, "the PodGroup deleted once it finished")
        used = podgroup_requests_check(requests, objects, "scheduling.k8s.io")
        assert used == PODGROUP_VERBS
