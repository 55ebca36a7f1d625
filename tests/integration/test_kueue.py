"""Kueue's own controller (v0.15.2, built from its module: devcluster/kueue.py) and mpiop on one apiserver: a job of
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

Preemption with a graceful stop (issue 52): a job of a higher WorkloadPriorityClass preempts a running one in a
ClusterQueue with quota for one job. Kueue suspends the preempted job; mpiop deletes its launcher first, with the
stop grace, and its workers once the launcher ended; Kueue keeps the preempted Workload's quota while the workers
are active, and admits the preemptor once they are gone (a suspended job's pods being deleted count as active in
its replicaStatuses: they hold their GPUs until they end). The preempted job is re-admitted and resumes once the
preemptor finished.

DRA jobs under Kueue: test_kueue_dra.py.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from devcluster.controlplane import ControlPlane
from devcluster.kueue import Kueue
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER
from mpiop.kube.client import (
    PODS,
    ApiError,
    KubeClient,
)
from mpiop.names import STOP_GRACE_ANNOTATION
from mpiop.policies import graceful_stop
from testkit.gpupool import gpu_pool, laid_out, total_gpus_job
from testkit.kueue import (
    PRIORITY_CLASS_LABEL,
    QUEUE,
    QUEUE_NAME_LABEL,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    admitted,
    condition,
    conditions,
    cq_usage,
    job_webhooks,
    kueue_events,
    kueue_queue,
    pod_timeline,
    workload_of,
    workload_priority_class,
)
from testkit.mpijobs import make_mpijob
from testkit.nodes import GPU, gpu_nodes
from testkit.operator import Cluster, Operator, drive_to_success, eventually, running_operator, start_pods

# The first test starts Kueue (tests/integration/conftest.py's `kueue`, run last); `make test-binaries` built it.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kueue")]  # one Kueue: on one xdist worker
QUOTA = {"cpu": "64", "memory": "512Gi", GPU: "16"}


@pytest.fixture
async def pool(kube: KubeClient) -> AsyncIterator[str]:
    async with gpu_pool(kube, lambda name, labels: gpu_nodes(f"{name}-eight", 4, 8, labels=labels)) as name:
        yield name


@pytest.fixture
async def queue(kube: KubeClient, cluster: Cluster, kueue: Kueue) -> AsyncIterator[str]:
    """QUEUE with QUOTA, in which the GPU jobs fit up to 16 GPUs."""
    async with kueue_queue(kube, cluster.ns, QUOTA) as name:
        yield name


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


def job_pod_sets(job: JSON) -> dict[str, tuple[int, str | None]]:
    """The pod sets Kueue makes of an MPIJob: one per replica type, lower-cased, a missing count being 1."""
    return pod_sets({"spec": {"podSets": [{"name": kind.lower(), "count": spec.get("replicas", 1), **spec}
                                          for kind, spec in job["spec"]["mpiReplicaSpecs"].items()]}})


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
    """Kueue's MPIJob webhooks and mpiop's GPU layout webhook on the test's namespace, both in effect."""
    async with job_webhooks(operator, kube, cluster.ns, in_queue("probe", pool, 16)):
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


# Preemption with a graceful stop. Quota for one job of a launcher and 2 workers of 1 CPU each; Kueue preempts
# within the ClusterQueue for a job of higher WorkloadPriorityClass.
ONE_JOB = {"cpu": "3"}
POD_GRACE = 120  # the pods' terminationGracePeriodSeconds, which caps the stop grace
STOP_GRACE = 90  # long enough that the launcher, not the grace, ends the stop on a busy machine


@pytest.fixture
async def priorities(kube: KubeClient, cluster: Cluster) -> AsyncIterator[tuple[str, str]]:
    """WorkloadPriorityClasses (low, high) of the test's own."""
    made = {f"{cluster.ns}-low": 100, f"{cluster.ns}-high": 1000}
    for name, value in made.items():
        await kube.create(WORKLOAD_PRIORITY_CLASSES, None, workload_priority_class(name, value))
    try:
        yield f"{cluster.ns}-low", f"{cluster.ns}-high"
    finally:
        for name in made:
            with contextlib.suppress(ApiError):
                await kube.delete(WORKLOAD_PRIORITY_CLASSES, None, name)


@pytest.fixture
async def node(cluster: Cluster) -> AsyncIterator[str]:
    """A Node without kubelet: a pod bound to it and deleted gracefully stays terminating until the test ends it."""
    async with cluster.bare_node() as name:
        yield name


def cpu_job(name: str, priority: str, stop_grace: int | None = None) -> JSON:
    """A launcher and 2 workers of 1 CPU each, in QUEUE at `priority`, as Kueue's webhook leaves it (suspended)."""
    job = make_mpijob(name).workers(2).label(QUEUE_NAME_LABEL, QUEUE).label(PRIORITY_CLASS_LABEL, priority)
    for replica in (LAUNCHER, WORKER):
        job.request(replica, "cpu", "1").pod_spec(replica, terminationGracePeriodSeconds=POD_GRACE)
    manifest = job.suspend().manifest()
    if stop_grace is not None:
        manifest["metadata"]["annotations"] = {STOP_GRACE_ANNOTATION: str(stop_grace)}
    return manifest


async def terminating(cluster: Cluster, name: str) -> bool:
    pod = await cluster.pod(name)
    return pod is not None and bool(pod["metadata"].get("deletionTimestamp"))


async def end(cluster: Cluster, pod: str) -> None:
    """The kubelet's part: the pod's containers exited, it is removed."""
    await cluster.kube.delete(PODS, cluster.ns, pod, grace_period_seconds=0)


async def test_a_preempted_job_tells_its_launcher_first_and_the_preemptor_runs_once_its_pods_are_gone(
        control_plane: ControlPlane, cluster: Cluster, kube: KubeClient, kueue: Kueue, node: str,
        priorities: tuple[str, str]) -> None:
    low, high = priorities
    async with kueue_queue(kube, cluster.ns, ONE_JOB, {"withinClusterQueue": "LowerPriority"}), \
            running_operator(str(control_plane.kubeconfig), cluster.ns) as operator, \
            pod_timeline(kube, cluster.ns) as timeline:
        await cluster.create_job(cpu_job("low", low, STOP_GRACE))
        old = ["low-launcher", "low-worker-0", "low-worker-1"]
        await start_pods(cluster, "low", 2, nodes=dict.fromkeys(old, node))
        old_uids = {n: p["metadata"]["uid"] for n, p in (await cluster.pods()).items()}

        async def all_quota_used() -> dict[str, dict[str, str]] | None:
            usage = await cq_usage(kube, cluster.ns)
            return usage if usage["flavorsUsage"].get("cpu") == ONE_JOB["cpu"] else None

        print(f"\nlow running: ClusterQueue {await eventually(all_quota_used, what='low using all the quota')}")

        await cluster.create_job(cpu_job("high", high))
        preempted = timeline.clock()

        async def evicted() -> JSON | None:
            workload = await workload_of(kube, cluster.ns, "MPIJob", "low")
            found = None if workload is None else condition(workload, "Evicted")
            return workload if found is not None and found["status"] == "True" else None

        workload = await eventually(evicted, what="low's Workload evicted")
        print(f"low's Workload at its eviction: {conditions(workload)}")
        assert conditions(workload)["Evicted"] == "True Preempted"
        await eventually(lambda: terminating(cluster, "low-launcher"), what="low's launcher told (deleted) first")
        stopping = await eventually(lambda: cluster.condition("low", graceful_stop.STOPPING), what="low Stopping")
        print(f"Stopping: {stopping['message']}")
        assert stopping["reason"] == graceful_stop.SUSPENDED
        assert timeline.grace["low-launcher"] == STOP_GRACE
        assert "stop grace 90s, annotation mpiop.kubeflow.org/stop-grace-seconds)" in stopping["message"]
        await operator.settle()
        # While mpirun may checkpoint: the workers stay, and so does low's quota; high waits for it.
        assert not [p for p in old[1:] if await terminating(cluster, p)], "no worker deleted while mpirun runs"
        workload = await kube.get(WORKLOADS, cluster.ns, workload["metadata"]["name"])
        high_workload = await workload_of(kube, cluster.ns, "MPIJob", "high")
        assert high_workload is not None
        print(f"while low stops: low's Workload {conditions(workload)}; high's {conditions(high_workload)}; "
              f"ClusterQueue {await cq_usage(kube, cluster.ns)}")
        assert conditions(workload)["QuotaReserved"].startswith("True")
        assert not admitted(high_workload) and not [p for p in await cluster.pods() if p.startswith("high-")]

        await end(cluster, "low-launcher")  # mpirun exited: its ranks checkpointed
        for worker in old[1:]:
            await eventually(functools.partial(terminating, cluster, worker), what=f"{worker} deleted after")
        await operator.settle()
        # Kueue waits for the job's replicaStatuses to have no active pod, and a suspended job's terminating pods
        # count as active: while low's workers have their SIGTERM grace (no kubelet ends them here), high waits.
        assert not [p for p in await cluster.pods() if p.startswith("high-")], "high made while low's workers end"
        workload = await kube.get(WORKLOADS, cluster.ns, workload["metadata"]["name"])
        assert conditions(workload)["QuotaReserved"].startswith("True"), conditions(workload)
        for worker in old[1:]:
            await end(cluster, worker)

        async def high_pods() -> bool:
            return any(p.startswith("high-") for p in await cluster.pods())

        await eventually(high_pods, what="high's pods")
        still = [p for p in old[1:] if await cluster.pod(p) is not None]
        print(f"when high's first pod was made, low's pods left: {still}")
        assert still == []
        workload = await kube.get(WORKLOADS, cluster.ns, workload["metadata"]["name"])
        print(f"low's Workload once released: {conditions(workload)}")
        assert conditions(workload)["QuotaReserved"].startswith("False Pending")
        assert (conditions(workload)["Evicted"], conditions(workload)["Requeued"]) == (
            "True Preempted", "True Preempted")
        job = await cluster.job("low")
        assert job is not None
        stopped = next(c for c in job["status"]["conditions"] if c["type"] == graceful_stop.STOPPING)
        print(f"low's Stopping: {stopped['status']} {stopped['reason']}: {stopped['message']}")
        assert (stopped["status"], stopped["reason"]) == ("False", graceful_stop.LAUNCHER_ENDED)
        print("pod timeline (seconds since the timeline began; high created at "
              f"{preempted:.2f}s):\n  " + "\n  ".join(timeline.lines()))
        workers_deleted = [timeline.at("deleting", w) for w in old[1:]]
        assert timeline.at("deleting", "low-launcher") < min(workers_deleted)
        assert max(timeline.at("gone", w) for w in old[1:]) < timeline.at("created", "high-")

        await drive_to_success(cluster, "high", workers=2)

        async def resumed() -> dict[str, JSON] | None:
            pods = await cluster.pods()
            fresh = {n: p for n, p in pods.items() if n.startswith("low-") and p["metadata"]["uid"] not in
                     old_uids.values() and not p["metadata"].get("deletionTimestamp")}
            return fresh if len(fresh) == 3 else None

        fresh = await eventually(resumed, timeout=60, what="low re-admitted and its new attempt's pods made")
        readmitted = await workload_of(kube, cluster.ns, "MPIJob", "low")
        assert readmitted is not None
        print(f"low resumed, pods {sorted(fresh)}; its Workload {conditions(readmitted)}; ClusterQueue "
              f"{await cq_usage(kube, cluster.ns)}")
        print("Kueue's Events on low: " + "; ".join(await kueue_events(kube, cluster.ns, "low")))
        assert admitted(readmitted)
        assert (conditions(readmitted)["QuotaReserved"], conditions(readmitted)["Evicted"]) == (
            "True QuotaReserved", "False QuotaReserved")
        job = await cluster.job("low")
        assert job is not None and job["spec"]["runPolicy"]["suspend"] is False
        await operator.settle()
