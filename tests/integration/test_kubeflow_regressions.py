"""kubeflow/mpi-operator's recent bugs, each replayed against the real apiserver (the test plays the kubelet).

- #787: the Running condition set True again by a pod change after the job had finished;
- #810: a launcher made again while the earlier one is still terminating (its mpirun still running);
- #647: an evicted worker leaving the job Failed without completionTime, so cleanPodPolicy and TTL never ran;
- #643: `cleanPodPolicy: All` leaving the launcher;
- #704/#738 (and #832): a custom cluster domain in the hostfile but not in discover_hosts.sh (nor the DNS
  search path).

Where a test checks that something did not happen, it first waits for a reconcile of the job to end after the
change that could have made it happen (`a_pass_after`), so it never asserts before the operator had its chance.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from devcluster.controlplane import ControlPlane
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.kube.client import CONFIGMAPS, PODS
from testkit.operator import Cluster, Operator, eventually, mpijob, running_operator, start_pods

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]



def reconciles_done() -> float:
    """Reconciles this process's operators finished (ok or failed), from mpiop's own histogram."""
    return sum(REGISTRY.get_sample_value("mpiop_reconcile_duration_seconds_count", {"result": result}) or 0.0
               for result in ("ok", "error"))


async def a_pass_after(change: Callable[[], Awaitable[None]]) -> None:
    """Make `change` (which makes the operator reconcile the job) and wait until a reconcile ends after it, so
    any pass that began before it (and what that pass writes) is over too."""
    before = reconciles_done()
    await change()

    async def ended() -> bool:
        return reconciles_done() > before

    await eventually(ended, what="a reconcile after the change")


@pytest.fixture
async def node(cluster: Cluster) -> AsyncIterator[str]:
    """A Node object (no kubelet behind it): a pod bound to it is deleted gracefully, staying terminating."""
    async with cluster.bare_node() as name:
        yield name


async def status_of(cluster: Cluster, name: str) -> JSON:
    job = await cluster.job(name)
    assert job is not None
    status: JSON = job.get("status") or {}
    return status


async def test_787_running_is_not_set_again_after_the_job_finished(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("fin", workers=1, run_policy={"cleanPodPolicy": "None"}))
    await start_pods(cluster, "fin", 1)
    await cluster.set_phase("fin-launcher", "Succeeded", exit_code=0, reason="Completed")
    await eventually(lambda: cluster.condition("fin", "Succeeded"), what="Succeeded")
    finished = await status_of(cluster, "fin")

    # Pods change after the end (each a real change, so the operator reconciles): the launcher reported Running
    # again (a late or replayed kubelet status), a kept worker's readiness flapping.
    await a_pass_after(lambda: cluster.set_phase("fin-launcher", "Running", ready=True))
    await a_pass_after(lambda: cluster.set_phase("fin-worker-0", "Running", ready=False, message="restarted"))
    after = await status_of(cluster, "fin")
    running = [c for c in after["conditions"] if c["type"] == "Running"]
    assert [c["status"] for c in running] == ["False"], running
    assert await cluster.condition("fin", "Succeeded") is not None
    assert after["completionTime"] == finished["completionTime"]


async def test_810_no_launcher_is_made_while_the_earlier_one_is_terminating(cluster: Cluster, operator: Operator,
                                                                            node: str) -> None:
    await cluster.create_job(mpijob("tl", workers=1))
    await start_pods(cluster, "tl", 1, nodes={"tl-launcher": node})

    # A worker fails: the attempt's pods are deleted, the launcher gracefully (bound to a node, it stays
    # terminating, its mpirun running, until its kubelet ends it), and the next attempt's are made.
    await cluster.set_phase("tl-worker-0", "Failed", exit_code=1)

    async def next_attempt_worker() -> JSON | None:
        worker = await cluster.pod("tl-worker-0")
        labels = (worker or {}).get("metadata", {}).get("labels") or {}
        return worker if labels.get(names.ATTEMPT_LABEL) == "1" else None

    await eventually(next_attempt_worker, what="the next attempt's worker")
    await a_pass_after(lambda: cluster.set_phase("tl-worker-0", "Running", ready=True))
    pods = await cluster.pods()
    assert pods["tl-launcher"]["metadata"].get("deletionTimestamp"), "the first launcher is still terminating"
    assert "tl-launcher-1" not in pods, "a second launcher while the first one's mpirun may still run"

    # Its kubelet is done with it: the next launcher is made.
    await cluster.kube.delete(PODS, cluster.ns, "tl-launcher", grace_period_seconds=0)
    await eventually(lambda: cluster.pod("tl-launcher-1"), what="the next attempt's launcher once the first is gone")


async def test_647_an_evicted_worker_fails_the_job_with_completion_time_then_cleanup_and_ttl(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    """Evictions past --max-disruption-restarts (0 here) count as failures: backoffLimit 0 fails the job, which is
    then finished like any other: completionTime, cleanPodPolicy Running, ttlSecondsAfterFinished."""
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, max_disruption_restarts=0):
        await cluster.create_job(mpijob("evf", workers=2, run_policy={
            "backoffLimit": 0, "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 5}))
        await start_pods(cluster, "evf", 2)
        await cluster.kube.patch(PODS, cluster.ns, "evf-worker-1", {"status": {
            "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": "The node was low on resource: memory."}]}}, subresource="status")
        failed = await eventually(lambda: cluster.condition("evf", "Failed"), what="Failed")
        assert "evf-worker-1" in failed["message"]
        status = await status_of(cluster, "evf")
        assert status.get("completionTime"), status

        async def nothing_running() -> dict[str, str] | None:
            phases = {n: str(p.get("status", {}).get("phase")) for n, p in (await cluster.pods()).items()}
            return phases if not any(p in ("Pending", "Running") for p in phases.values()) else None

        left = await eventually(nothing_running, what="cleanPodPolicy Running: no pod Pending or Running")
        assert left == {"evf-worker-1": "Failed"}, left

        async def job_gone() -> bool:
            return await cluster.job("evf") is None

        await eventually(job_gone, timeout=60, what="ttlSecondsAfterFinished: the job deleted")


async def test_643_clean_pod_policy_all_deletes_the_launcher_too(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("all", workers=2, run_policy={"cleanPodPolicy": "All"}))
    await start_pods(cluster, "all", 2)
    await cluster.set_phase("all-launcher", "Succeeded", exit_code=0, reason="Completed")
    await eventually(lambda: cluster.condition("all", "Succeeded"), what="Succeeded")

    async def no_pod_left() -> bool:
        return not await cluster.pods()

    await eventually(no_pod_left, what="every pod deleted, the Succeeded launcher included")


async def test_704_738_a_custom_cluster_domain_reaches_the_hostfile_discover_hosts_and_dns(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    domain = "kube.local"
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, cluster_domain=domain):
        await cluster.create_job(mpijob("dom", workers=2))
        pods = await start_pods(cluster, "dom", 2)
        service = f"dom.{cluster.ns}.svc.{domain}"
        wanted = [f"dom-worker-{i}.{service}" for i in range(2)]

        async def config() -> JSON | None:
            found = await cluster.kube.get_or_none(CONFIGMAPS, cluster.ns, "dom-config")
            data = (found or {}).get("data") or {}
            # discover_hosts.sh is a soft write (it follows Running workers within seconds): read until it does.
            return data if all(host in data.get("discover_hosts.sh", "") for host in wanted) else None

        data = await eventually(config, what=f"discover_hosts.sh naming the workers under {domain}")
        assert [line.split()[0] for line in data["hostfile"].splitlines()] == wanted
        assert [line.split()[-1].rsplit(":", 1)[0] for line in data["discover_hosts.sh"].splitlines()[1:]] == wanted
        for name, pod in (await cluster.pods()).items():
            if name in pods:
                searches = (pod["spec"].get("dnsConfig") or {}).get("searches") or []
                assert service in searches, (name, searches)
