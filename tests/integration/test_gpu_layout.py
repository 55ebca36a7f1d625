"""Total-GPU mode (spec.gpus) through the real apiserver: the operator's Node informer sees plain Node objects of
mixed GPU shapes (no kubelet runs them: the test plays the kubelet for the pods), and lays jobs out before any pod.

The nodes are a pool of the test's own (testkit/gpupool.py), whose jobs tolerate the not-ready taint that no
kubelet lifts, but not the `dedicated` taint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from devcluster.binaries import kube_binary
from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.kube.client import CONFIGMAPS, EVENTS, MPIJOBS, NODES, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.policies.gpu_layout import WAITING
from testkit.gpupool import POOL_LABEL, gpu_pool, laid_out, total_gpus_job, worker_gpu_limit
from testkit.layout_webhook import serving_layout_webhook
from testkit.nodes import gpu_node, gpu_nodes, taint
from testkit.operator import Cluster, Operator, eventually, start_pods

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(kube: KubeClient) -> AsyncIterator[str]:
    """Eight 8-GPU nodes, two 4-GPU nodes and two 8-GPU nodes tainted dedicated=infer, in a pool of their own."""
    def nodes(name: str, labels: dict[str, str]) -> list[JSON]:
        return [*gpu_nodes(f"{name}-eight", 8, 8, labels=labels), *gpu_nodes(f"{name}-four", 2, 4, labels=labels),
                *gpu_nodes(f"{name}-infer", 2, 8, labels=labels, taints=[taint("dedicated", "infer")])]

    async with gpu_pool(kube, nodes) as name:
        yield name


async def waiting(cluster: Cluster, name: str) -> JSON | None:
    """The job's Running=False condition of a job that waits for a layout."""
    job = await cluster.job(name)
    return next((c for c in (job or {}).get("status", {}).get("conditions", [])
                 if c["type"] == "Running" and c["reason"] == WAITING), None)


async def test_64_gpus_on_8_gpu_nodes_run_as_8_workers_of_8_slots(cluster: Cluster, operator: Operator,
                                                                   pool: str) -> None:
    await cluster.create_job(total_gpus_job("big", pool, 64))
    job = await eventually(lambda: laid_out(cluster, "big"), what="big laid out")
    record = job["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION]
    print(f"\n{GPU_LAYOUT_ANNOTATION}: {record}")
    assert record == ("64 nvidia.com/gpu as 8 workers x 8 GPUs (slotsPerWorker 8), on nodes: 2 nodes with 4 "
                      "nvidia.com/gpu, 8 nodes with 8 nvidia.com/gpu")
    assert job["spec"]["gpus"] == 64  # the request stays beside the ordinary v2beta1 fields it became
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert (worker["replicas"], worker_gpu_limit(job), job["spec"]["slotsPerWorker"]) == (8, "8", 8)
    workers = [f"big-worker-{i}" for i in range(8)]

    async def all_pods() -> dict[str, JSON] | None:
        pods = await cluster.pods()
        return pods if {*workers, "big-launcher"} <= set(pods) else None

    pods = await eventually(all_pods, what="big's pods")
    assert {pods[w]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for w in workers} == {"8"}
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, "big-config")
    hostfile = config["data"]["hostfile"].splitlines()
    print("hostfile:\n" + "\n".join(hostfile))
    assert hostfile == [f"big-worker-{i}.big.{cluster.ns}.svc slots=8" for i in range(8)]
    await start_pods(cluster, "big", 8)
    events = (await cluster.kube.list(EVENTS, cluster.ns))["items"]
    assert [e["message"] for e in events if e["reason"] == "GPULayout"] == [f"laid out {record}"]
    after = await cluster.job("big")
    # never laid out again
    assert after is not None and after["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION] == record


async def test_12_gpus_are_3_workers_of_4_and_13_waits_until_a_node_fits(cluster: Cluster, operator: Operator,
                                                                          kube: KubeClient, pool: str) -> None:
    await cluster.create_job(total_gpus_job("twelve", pool, 12))
    job = await eventually(lambda: laid_out(cluster, "twelve"), what="twelve laid out")
    print(f"\n{GPU_LAYOUT_ANNOTATION}: {job['metadata']['annotations'][GPU_LAYOUT_ANNOTATION]}")
    assert (job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], worker_gpu_limit(job)) == (3, "4")

    with capture_logs() as logs:  # the operator's log names the nodes left out, for an admin
        await cluster.create_job(total_gpus_job("thirteen", pool, 13))
        condition = await eventually(lambda: waiting(cluster, "thirteen"), what="thirteen waiting")
    print(f"Running=False {WAITING}: {condition['message']}")
    logged = [(line["job"], line["left_out"]) for line in logs if line["event"] == "total-GPU job waits"]
    print(f"the operator's log: {logged[:1]}")
    assert logged and set(map(str, logged)) == {str((f"{cluster.ns}/thirteen", [
        f"{pool}-infer-{i} (8 nvidia.com/gpu): taint dedicated=infer:NoSchedule not tolerated" for i in (0, 1)]))}
    assert condition["message"] == (  # the nodes left out counted, not named: the job's owner may not read nodes
        f"MPIJob {cluster.ns}/thirteen waits: no layout of 13 nvidia.com/gpu fits the nodes the Worker template may "
        "run on (2 nodes with 4 nvidia.com/gpu, 8 nodes with 8 nvidia.com/gpu; left out: 2 nodes with 8 nvidia.com/gpu "
        "(2 taint not tolerated)): no worker size of 2 GPUs or more divides both 13 and a node's GPUs, and 13 is "
        "larger than any node")
    assert not [p for p in await cluster.pods() if p.startswith("thirteen-")]  # it never guesses
    # A 16-GPU node joins the pool: the Node informer wakes the waiting job, which now fits on one node.
    await kube.create(NODES, None, gpu_node(f"{pool}-sixteen", 16, labels={POOL_LABEL: pool}))
    try:
        job = await eventually(lambda: laid_out(cluster, "thirteen"), what="thirteen laid out")
        print(f"{GPU_LAYOUT_ANNOTATION}: {job['metadata']['annotations'][GPU_LAYOUT_ANNOTATION]}")
        assert (job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], worker_gpu_limit(job)) == (1, "13")
    finally:
        await kube.delete(NODES, None, f"{pool}-sixteen")


async def test_with_the_webhook_a_job_is_stored_laid_out_and_one_that_fits_nowhere_as_written(
        control_plane: ControlPlane, cluster: Cluster, operator: Operator, kube: KubeClient, pool: str) -> None:
    """deploy/'s MutatingWebhookConfiguration, mpiop's webhook and the real apiserver: the create's answer is the
    laid-out job, the controller never writes the spec, and the first pass says in an Event how it was laid out."""
    async with serving_layout_webhook(operator, kube, cluster.ns, total_gpus_job("probe", pool, 16)):
        created = await cluster.create_job(total_gpus_job("big", pool, 64))
        record = created["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION]
        print(f"\nthe create's answer: {GPU_LAYOUT_ANNOTATION}: {record}")
        assert record == ("64 nvidia.com/gpu as 8 workers x 8 GPUs (slotsPerWorker 8), on nodes: 2 nodes with 4 "
                          "nvidia.com/gpu, 8 nodes with 8 nvidia.com/gpu, at admission")
        worker = created["spec"]["mpiReplicaSpecs"]["Worker"]
        assert (worker["replicas"], worker_gpu_limit(created), created["spec"]["slotsPerWorker"],
                created["spec"]["gpus"]) == (8, "8", 8, 64)
        # kubectl prints the webhook's warning; the job is stored as written, and the controller says why it waits.
        kubectl = await asyncio.create_subprocess_exec(
            str(kube_binary("kubectl")), f"--kubeconfig={control_plane.kubeconfig}", "create", "-n", cluster.ns,
            "-f", "-", "-o", "json", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await kubectl.communicate(json.dumps(total_gpus_job("thirteen", pool, 13)).encode())
        print(f"kubectl create (13 GPUs): {err.decode().strip()}")
        assert kubectl.returncode == 0 and err.decode().strip() == (  # nothing of the nodes: anyone may ask
            "Warning: spec.gpus: the job waits until a layout fits (its Running condition says why)")
        assert GPU_LAYOUT_ANNOTATION not in (json.loads(out)["metadata"].get("annotations") or {})

        async def all_pods() -> dict[str, JSON] | None:
            pods = await cluster.pods()
            return pods if {*(f"big-worker-{i}" for i in range(8)), "big-launcher"} <= set(pods) else None

        await eventually(all_pods, what="big's pods")
        await eventually(lambda: waiting(cluster, "thirteen"), what="thirteen waiting")
        await operator.settle()
    events = (await cluster.kube.list(EVENTS, cluster.ns))["items"]
    assert [e["message"] for e in events if e["reason"] == "GPULayout"] == [f"laid out {record}"]
    assert operator.requests.writes()[("PATCH", "mpijobs")] == 0  # only status: the spec was laid out at admission
    assert not [p for p in await cluster.pods() if p.startswith("thirteen-")]


async def test_a_job_created_suspended_as_kueue_does_is_laid_out_before_it_is_resumed(
        cluster: Cluster, operator: Operator, pool: str) -> None:
    await cluster.create_job(total_gpus_job("queued", pool, 16, suspend=True))
    job = await eventually(lambda: laid_out(cluster, "queued"), what="queued laid out while suspended")
    assert (job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], worker_gpu_limit(job)) == (2, "8")
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert not await cluster.pods()
    await cluster.kube.patch(MPIJOBS, cluster.ns, "queued", {"spec": {"runPolicy": {"suspend": False}}})

    async def workers() -> set[str] | None:
        found = {p for p in await cluster.pods() if p.startswith("queued-worker-")}
        return found if len(found) == 2 else None

    assert await eventually(workers, what="queued's workers") == {"queued-worker-0", "queued-worker-1"}


async def test_the_pass_that_writes_the_layout_asks_for_the_next_one_at_once(control_plane: ControlPlane,
                                                                            cluster: Cluster, pool: str) -> None:
    """The layout's own watch event changes nothing the cache holds (the write's answer is fed back first), so it
    queues no pass: the pass that wrote it asks to be run again at once, and that one makes the pods. Run by hand
    here, with the informers but no workers, so no other pass can hide a missing requeue."""
    client = await KubeClient.connect(str(control_plane.kubeconfig), qps=0, burst=100)
    manager = Manager(client, ManagerConfig(namespace=cluster.ns))
    informers = [asyncio.create_task(i.run()) for i in manager.caches.all()]
    try:
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in manager.caches.all())), 30)
        await cluster.create_job(total_gpus_job("once", pool, 16))
        key = f"{cluster.ns}/once"

        async def cached() -> bool:
            return manager.caches.mpijobs.get(key) is not None

        await eventually(cached, what="the job in the cache")
        assert await manager.reconciler.reconcile(key) == 0.0
        laid_out_job = manager.caches.mpijobs.get(key)
        assert laid_out_job is not None and laid_out_job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        await manager.reconciler.reconcile(key)
        assert {"once-worker-0", "once-worker-1", "once-launcher"} <= set(await cluster.pods())
    finally:
        for task in informers:
            task.cancel()
        await asyncio.gather(*informers, return_exceptions=True)
        await manager.recorder.close(timeout=0)
        await client.close()


async def test_a_template_over_the_entries_limit_waits_saying_so_and_the_operator_stays_responsive(
        control_plane: ControlPlane, cluster: Cluster, operator: Operator, kube: KubeClient, pool: str) -> None:
    """Issue 50: a Worker template of 20,000 tolerations (the CRD bounds no list of it) matched against every node,
    again at each node event, held the event loop for seconds. Now it is over --gpu-layout-max-entries: the
    webhook reads the ~0.3 MiB body (more than the status endpoint's 64 KiB) and warns, the job waits naming the
    field and the limit, and node events meanwhile leave the operator serving other jobs. 8,000 tolerations, not
    20,000: the job stays under --max-mpijob-kib (512), over which it would fail instead of waiting (issue 60)."""
    huge = total_gpus_job("huge", pool, 16)
    worker = huge["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["tolerations"] += [{"key": f"t{i}", "operator": "Exists"} for i in range(8_000)]
    limit = operator.manager.config.settings.gpu_layout_max_entries
    over = (f"spec.mpiReplicaSpecs.Worker.template.spec.tolerations: 8002 entries, over the GPU layout's limit of "
            f"{limit} (the operator's --gpu-layout-max-entries)")
    async with serving_layout_webhook(operator, kube, cluster.ns, total_gpus_job("probe", pool, 16)):
        body = json.dumps(huge).encode()
        kubectl = await asyncio.create_subprocess_exec(
            str(kube_binary("kubectl")), f"--kubeconfig={control_plane.kubeconfig}", "create", "-n", cluster.ns,
            "-f", "-", "-o", "name", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        _, err = await kubectl.communicate(body)
        print(f"\nkubectl create ({len(body)} bytes): {err.decode().strip()}")
        assert kubectl.returncode == 0 and err.decode().strip() == (
            f"Warning: spec.gpus: mpiop does not lay this job out: {over}")
        condition = await eventually(lambda: waiting(cluster, "huge"), what="huge waiting")
        print(f"Running=False {WAITING}: {condition['message']}")
        assert condition["message"] == (
            f"MPIJob {cluster.ns}/huge waits: {over}; shorten it, or lay the job out yourself (Worker.replicas and the "
            "first worker container's nvidia.com/gpu limit)")
        # Node events wake the waiting job, pass after pass; meanwhile another job is laid out and made.
        for i in range(10):
            await kube.patch(NODES, None, f"{pool}-eight-{i % 8}", {"metadata": {"labels": {"touched": str(i)}}})
        await cluster.create_job(total_gpus_job("other", pool, 16))

        async def other_made() -> JSON | None:
            pods = await cluster.pods()
            job = await cluster.job("other")
            created = next((c for c in (job or {}).get("status", {}).get("conditions", []) if c["type"] == "Created"),
                           None)
            return job if created and {"other-worker-0", "other-worker-1", "other-launcher"} <= set(pods) else None

        other = await eventually(other_made, what="other laid out, its pods made and its status written")
        assert other["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        await operator.settle()
    assert not [p for p in await cluster.pods() if p.startswith("huge-")]
    after = await waiting(cluster, "huge")
    assert after is not None and after["message"] == condition["message"]
