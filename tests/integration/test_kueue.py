"""Kueue's own controller (v0.17, built from its module: devcluster/kueue.py) and mpiop on one apiserver: a job of
total GPUs queued in Kueue ends with the Workload Kueue admitted made of mpiop's layout, and runs as laid out.

The GPU nodes are a pool of the test's own: four 8-GPU nodes, so 16 GPUs are 2 workers x 8 and 32 are 4 x 8; the
ClusterQueue has 16 GPUs of quota.

With both webhooks (`webhooks`: Kueue's MPIJob webhooks and mpiop's GPU layout webhook, on the test's namespace
only) a job is created as a user writes it, with its queue-name label: Kueue's webhook suspends it and mpiop's lays
it out in the same request, so Kueue only ever sees the laid-out job: one Workload, of the layout, admitted once.

Without mpiop's webhook (the first test: the job created as Kueue's webhook leaves one, suspended), Kueue and mpiop
both act on the new job, and Kueue is first: mpiop holds a suspended job's first pass, layout and all, up to 5 s
(controller/soft_writes.py, which says why), and within about a second Kueue makes a Workload of the job as written
(1 worker, no GPU, within any quota), admits it and resumes the job. mpiop then lays out the resumed job (it has
no pod yet); Kueue finds the job no longer matches its Workload, stops it, deletes that Workload ("Deleted not
matching Workload") and makes one of the layout. The test waits for that end, and prints Kueue's Events and
mpiop's pod writes: more than 3 POSTs say mpiop made the pods in the window where the job ran under the Workload
of the job as written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace

import pytest

from devcluster.controlplane import ControlPlane
from devcluster.kueue import JOB_WEBHOOKS_LABEL, Kueue
from mpiop.api.raw import JSON
from mpiop.kube.client import EVENTS, MPIJOBS, NAMESPACES, ApiError, KubeClient, Resource
from testkit.gpupool import gpu_pool, laid_out, total_gpus_job
from testkit.kueue import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    QUEUE_NAME_LABEL,
    RESOURCE_FLAVORS,
    WORKLOADS,
    cluster_queue,
    condition,
    local_queue,
    resource_flavor,
    workload_of,
)
from testkit.layout_webhook import serving_layout_webhook
from testkit.nodes import GPU, gpu_nodes
from testkit.operator import Cluster, Operator, eventually

# The first test starts Kueue, built first if it is not yet (about 10 minutes on a fresh machine; tests/integration/
# conftest.py runs this module last, so .ci/run's background build has the rest of the suite's time).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
QUEUE = "user-queue"
QUOTA = {"cpu": "64", "memory": "512Gi", GPU: "16"}


@pytest.fixture(scope="module")
def kueue(control_plane: ControlPlane, mpijob_crd: str) -> Iterator[Kueue]:
    """Kueue's manager for this module; its MPIJob integration starts only once the MPIJob CRD is served."""
    with Kueue(control_plane) as running:
        yield running


@pytest.fixture
async def pool(kube: KubeClient) -> AsyncIterator[str]:
    async with gpu_pool(kube, lambda name, labels: gpu_nodes(f"{name}-eight", 4, 8, labels=labels)) as name:
        yield name


@pytest.fixture
async def queue(kube: KubeClient, cluster: Cluster, kueue: Kueue) -> AsyncIterator[str]:
    """LocalQueue `user-queue` in the test's namespace, of a ClusterQueue with QUOTA in a flavor of its own, both
    Active. Afterwards the namespace's jobs go first, and their Workloads (whose finalizer Kueue removes), while
    Kueue still runs: the queue and flavor, which Kueue keeps while in use, are then deleted at once."""
    flavor, cq = f"{cluster.ns}-flavor", f"{cluster.ns}-cq"
    await kube.create(RESOURCE_FLAVORS, None, resource_flavor(flavor))
    await kube.create(CLUSTER_QUEUES, None, cluster_queue(cq, flavor, QUOTA))
    await kube.create(LOCAL_QUEUES, cluster.ns, local_queue(QUEUE, cluster.ns, cq))

    async def active() -> bool:
        lq = await kube.get(LOCAL_QUEUES, cluster.ns, QUEUE)
        return (c := condition(lq, "Active")) is not None and c["status"] == "True"

    await eventually(active, what=f"LocalQueue {QUEUE} Active")
    try:
        yield QUEUE
    finally:
        for job in (await kube.list(MPIJOBS, cluster.ns))["items"]:
            with contextlib.suppress(ApiError):
                await kube.delete(MPIJOBS, cluster.ns, job["metadata"]["name"])

        async def no_workloads() -> bool:
            return not (await kube.list(WORKLOADS, cluster.ns))["items"]

        await eventually(no_workloads, what=f"the Workloads of {cluster.ns} gone")
        for resource, name in ((CLUSTER_QUEUES, cq), (RESOURCE_FLAVORS, flavor)):
            await kube.delete(resource, None, name)
            await eventually(absent(kube, resource, name), what=f"{name} deleted")


def absent(kube: KubeClient, resource: Resource, name: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return await kube.get_or_none(resource, None, name) is None
    return probe


def in_queue(name: str, pool: str, gpus: int) -> JSON:
    """A job of `gpus` total GPUs in QUEUE, as a user writes it."""
    job = total_gpus_job(name, pool, gpus)
    job["metadata"].setdefault("labels", {})[QUEUE_NAME_LABEL] = QUEUE
    return job


def queued(name: str, pool: str, gpus: int) -> JSON:
    """A job of `gpus` total GPUs as Kueue's MPIJob webhook leaves it: suspended, in QUEUE."""
    job = in_queue(name, pool, gpus)
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    return job


def pod_sets(workload: JSON) -> dict[str, tuple[int, str | None]]:
    """Each pod set's (count, first container's GPU limit)."""
    return {p["name"]: (p["count"], (p["template"]["spec"]["containers"][0].get("resources") or {})
                        .get("limits", {}).get(GPU)) for p in workload["spec"]["podSets"]}


def admitted(workload: JSON) -> bool:
    return (c := condition(workload, "Admitted")) is not None and c["status"] == "True"


def job_pod_sets(job: JSON) -> dict[str, tuple[int, str | None]]:
    """The pod sets Kueue makes of an MPIJob: one per replica type, lower-cased, a missing count being 1."""
    return pod_sets({"spec": {"podSets": [{"name": kind.lower(), "count": spec.get("replicas", 1), **spec}
                                          for kind, spec in job["spec"]["mpiReplicaSpecs"].items()]}})


async def kueue_events(kube: KubeClient, namespace: str, job: str) -> list[str]:
    """What Kueue said on the job (its Events' reasons and messages), oldest first; mpiop's are left out."""
    events = sorted((await kube.list(EVENTS, namespace))["items"], key=lambda e: e["metadata"]["creationTimestamp"])
    return [f"{e['reason']}: {e['message']}" for e in events if e["involvedObject"]["name"] == job
            and "kueue" in (e.get("source") or {}).get("component", "")]


async def test_without_mpiops_webhook_kueue_ends_admitting_the_laid_out_job_and_mpiop_makes_its_pods(
        cluster: Cluster, operator: Operator, kube: KubeClient, pool: str, queue: str) -> None:
    await cluster.create_job(queued("train", pool, 16))

    async def admitted_as_laid_out() -> JSON | None:
        """Kueue's admitted Workload, once it has the job's laid-out pod sets (the second one Kueue makes)."""
        job, workload = await laid_out(cluster, "train"), await workload_of(kube, cluster.ns, "MPIJob", "train")
        if job is None or workload is None or not admitted(workload):
            return None
        return workload if pod_sets(workload) == job_pod_sets(job) else None

    workload = await eventually(admitted_as_laid_out, timeout=60, what="train's Workload admitted as laid out")
    admission = workload["status"]["admission"]
    print(f"\nWorkload {workload['metadata']['name']} podSets (count, {GPU} limit): {pod_sets(workload)}")
    print(f"admission: {admission}")
    assert pod_sets(workload) == {"launcher": (1, None), "worker": (2, "8")}
    assignments = {a["name"]: a for a in admission["podSetAssignments"]}
    assert admission["clusterQueue"] == f"{cluster.ns}-cq"
    assert (assignments["worker"]["count"], assignments["worker"]["resourceUsage"][GPU]) == (2, "16")
    assert assignments["worker"]["flavors"] == {GPU: f"{cluster.ns}-flavor"}
    # Kueue's webhooks serve (devcluster/kueue.py): its pod sets are fixed while it holds quota; and, stored as
    # v1beta2, it reads as v1beta1 through the conversion webhook.
    bigger = [{**p, "count": 3} if p["name"] == "worker" else p for p in workload["spec"]["podSets"]]
    with pytest.raises(ApiError) as refused:
        await kube.patch(WORKLOADS, cluster.ns, workload["metadata"]["name"], {"spec": {"podSets": bigger}})
    print(f"Kueue's webhook on 3 workers: {refused.value}")
    old = await kube.get(replace(WORKLOADS, version="v1beta1"), cluster.ns, workload["metadata"]["name"])
    assert (old["apiVersion"], pod_sets(old)) == ("kueue.x-k8s.io/v1beta1", pod_sets(workload))
    wanted = {"train-launcher", "train-worker-0", "train-worker-1"}

    async def pods() -> dict[str, JSON] | None:
        found = await cluster.pods()
        return found if wanted <= set(found) else None

    made = await eventually(pods, what="train's pods")
    limits = {n: made[n]["spec"]["containers"][0].get("resources", {}).get("limits", {}).get(GPU) for n in sorted(made)}
    print(f"pods ({GPU} limit): {limits}")
    assert set(made) == wanted and limits == {"train-launcher": None, "train-worker-0": "8", "train-worker-1": "8"}
    job = await cluster.job("train")
    assert job is not None and job["spec"]["runPolicy"]["suspend"] is False
    # Kueue resumes a job with a merge patch of what it changes: the request stays beside the layout.
    assert (job["spec"]["gpus"], job_pod_sets(job)["worker"]) == (16, (2, "8"))
    print("Kueue's Events on the job: " + "; ".join(await kueue_events(kube, cluster.ns, "train")))
    print(f"mpiop's pod writes: {pod_writes(operator)}")


@pytest.fixture
async def webhooks(cluster: Cluster, operator: Operator, kube: KubeClient, pool: str) -> AsyncIterator[None]:
    """Kueue's MPIJob webhooks and mpiop's GPU layout webhook (deploy/base/webhook.yaml) on the test's namespace,
    both in effect, as in a cluster with Kueue and mpiop installed."""
    await kube.patch(NAMESPACES, None, cluster.ns, {"metadata": {"labels": {JOB_WEBHOOKS_LABEL: "true"}}})
    async with serving_layout_webhook(operator, kube, cluster.ns, in_queue("probe", pool, 16)):

        async def suspended_by_kueue() -> bool:
            answer = await kube.request("POST", MPIJOBS.path(cluster.ns), body=in_queue("probe", pool, 16),
                                        query={"dryRun": "All"})
            return bool(answer["spec"]["runPolicy"].get("suspend"))

        await eventually(suspended_by_kueue, what="Kueue's MPIJob webhook in effect in the namespace")
        yield


async def test_with_kueues_and_mpiops_webhooks_kueue_only_ever_sees_the_laid_out_job(
        cluster: Cluster, operator: Operator, kube: KubeClient, pool: str, queue: str, webhooks: None) -> None:
    """Kueue's MPIJob webhook suspends the job of a queue, mpiop's lays it out, and the job is stored so. The only
    Workload Kueue makes is of the layout, the job is admitted once and never stopped, and mpiop makes its pods
    once."""
    created = await cluster.create_job(in_queue("train", pool, 16))
    print(f"\nthe create's answer: suspend={created['spec']['runPolicy']['suspend']}, pod sets "
          f"{job_pod_sets(created)}")
    assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
    assert job_pod_sets(created) == {"launcher": (1, None), "worker": (2, "8")}  # mpiop's

    async def admitted_workload() -> JSON | None:
        workload = await workload_of(kube, cluster.ns, "MPIJob", "train")
        return workload if workload is not None and admitted(workload) else None

    workload = await eventually(admitted_workload, timeout=60, what="train's Workload admitted")
    print(f"Workload {workload['metadata']['name']} podSets (count, {GPU} limit): {pod_sets(workload)}")
    assert pod_sets(workload) == {"launcher": (1, None), "worker": (2, "8")}
    assignments = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}
    assert (assignments["worker"]["count"], assignments["worker"]["resourceUsage"][GPU]) == (2, "16")
    wanted = {"train-launcher", "train-worker-0", "train-worker-1"}

    async def pods() -> dict[str, JSON] | None:
        found = await cluster.pods()
        return found if wanted <= set(found) else None

    await eventually(pods, what="train's pods")
    await operator.settle()
    said = await kueue_events(kube, cluster.ns, "train")
    print("Kueue's Events on the job: " + "; ".join(said))
    print(f"mpiop's pod writes: {pod_writes(operator)}")
    assert not [e for e in said if e.startswith(("Stopped", "DeletedWorkload"))], said
    assert sum(e.startswith("CreatedWorkload") for e in said) == 1
    assert pod_writes(operator) == {"POST": 3}  # no pod made under a Workload of the job as written
    assert operator.requests.writes()[("PATCH", "mpijobs")] == 0  # the layout was the create's, not a later write


def pod_writes(operator: Operator) -> dict[str, int]:
    """mpiop's pod requests by verb: 3 POSTs for this job unless it made pods while Kueue held the wrong Workload."""
    return {verb: n for (verb, resource), n in operator.requests.writes().items() if resource == "pods"}


async def test_a_job_beyond_the_quota_is_stored_laid_out_and_stays_suspended_without_pods(
        cluster: Cluster, operator: Operator, kube: KubeClient, pool: str, queue: str, webhooks: None) -> None:
    """32 GPUs against a quota of 16: the only Workload is of the layout (4 x 8), Kueue finds no quota for it and
    never admits it, not even for a moment as the job was written (1 worker, no GPU)."""
    created = await cluster.create_job(in_queue("big", pool, 32))
    assert (created["spec"]["runPolicy"]["suspend"], job_pod_sets(created)["worker"]) == (True, (4, "8"))

    async def pending() -> JSON | None:
        """Kueue's Workload of the job, once Kueue found no quota for it."""
        workload = await workload_of(kube, cluster.ns, "MPIJob", "big")
        reserved = None if workload is None else condition(workload, "QuotaReserved")
        return workload if reserved is not None and reserved["reason"] == "Pending" else None

    workload = await eventually(pending, timeout=60, what="big's Workload pending")
    reserved = condition(workload, "QuotaReserved")
    assert reserved is not None
    print(f"\nWorkload {workload['metadata']['name']} podSets (count, {GPU} limit): {pod_sets(workload)}")
    print(f"QuotaReserved={reserved['status']} {reserved['reason']}: {reserved['message']}")
    assert pod_sets(workload) == {"launcher": (1, None), "worker": (4, "8")}
    assert reserved["status"] == "False" and "insufficient quota" in reserved["message"]
    await operator.settle()
    said = await kueue_events(kube, cluster.ns, "big")
    print("Kueue's Events on the job: " + "; ".join(said))
    print(f"mpiop's pod writes: {pod_writes(operator)}")
    assert [e.split(":")[0] for e in said] == ["CreatedWorkload"]  # never Started, so never Stopped
    job = await cluster.job("big")
    assert job is not None and job["spec"]["runPolicy"]["suspend"] is True
    assert condition(await kube.get(WORKLOADS, cluster.ns, workload["metadata"]["name"]), "Admitted") is None
    assert not await cluster.pods() and not pod_writes(operator)
