"""Kueue's objects for the tests that run its controller (devcluster/kueue.py): a ResourceFlavor, a ClusterQueue
with quota in it, a LocalQueue (all three made for a test's block by `kueue_queue`), WorkloadPriorityClasses, and
the Workloads Kueue makes from a job, read in kueue.x-k8s.io/v1beta2; and a timeline of a namespace's pods
(`PodTimeline`), to tell in which order two jobs' pods came and went."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from devcluster.kueue import API_VERSION, JOB_WEBHOOKS_LABEL, QUEUE_NAME_LABEL
from mpiop.api.raw import JSON
from mpiop.kube.client import EVENTS, MPIJOBS, NAMESPACES, PODS, ApiError, KubeClient, Resource
from testkit.layout_webhook import serving_layout_webhook
from testkit.operator import Operator, eventually

__all__ = ["CLUSTER_QUEUES", "LOCAL_QUEUES", "PRIORITY_CLASS_LABEL", "QUEUE", "QUEUE_NAME_LABEL", "RESOURCE_FLAVORS",
           "WORKLOADS", "WORKLOAD_PRIORITY_CLASSES", "PodTimeline", "admitted", "cluster_queue", "condition",
           "conditions", "cq_usage", "job_webhooks", "kueue_events", "kueue_queue", "local_queue", "pod_timeline",
           "resource_flavor", "workload_of", "workload_priority_class"]

_GROUP, _VERSION = API_VERSION.split("/")
RESOURCE_FLAVORS = Resource(_GROUP, _VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = Resource(_GROUP, _VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(_GROUP, _VERSION, "localqueues", "LocalQueue")
WORKLOADS = Resource(_GROUP, _VERSION, "workloads", "Workload")
WORKLOAD_PRIORITY_CLASSES = Resource(_GROUP, _VERSION, "workloadpriorityclasses", "WorkloadPriorityClass",
                                     namespaced=False)
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # a job's WorkloadPriorityClass, by name
QUEUE = "user-queue"  # the LocalQueue kueue_queue() makes


def resource_flavor(name: str) -> JSON:
    """A flavor without node labels: Kueue injects no node selector into the pods it admits."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}


def cluster_queue(name: str, flavor: str, quota: Mapping[str, str], preemption: JSON | None = None) -> JSON:
    """Every namespace's jobs may queue here; `quota`: resource name -> nominal quota, all in `flavor`;
    `preemption`: the ClusterQueue's (e.g. {"withinClusterQueue": "LowerPriority"}; Kueue's default: none)."""
    spec: JSON = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": list(quota), "flavors": [{
        "name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}
    if preemption is not None:
        spec["preemption"] = preemption
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def workload_priority_class(name: str, value: int) -> JSON:
    """Kueue's own priority, for the Workloads of jobs labelled PRIORITY_CLASS_LABEL=`name` (not the pods')."""
    return {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


async def workload_of(kube: KubeClient, namespace: str, kind: str, name: str) -> JSON | None:
    """The Workload Kueue made for the object `kind`/`name` (the one it owns), if any."""
    for workload in (await kube.list(WORKLOADS, namespace))["items"]:
        if any(o["kind"] == kind and o["name"] == name for o in workload["metadata"].get("ownerReferences") or []):
            return dict(workload)
    return None


def admitted(workload: JSON) -> bool:
    return (c := condition(workload, "Admitted")) is not None and c["status"] == "True"


async def kueue_events(kube: KubeClient, namespace: str, job: str) -> list[str]:
    """What Kueue said on the job (its Events' reasons and messages), oldest first; mpiop's are left out."""
    events = sorted((await kube.list(EVENTS, namespace))["items"], key=lambda e: e["metadata"]["creationTimestamp"])
    return [f"{e['reason']}: {e['message']}" for e in events if e["involvedObject"]["name"] == job
            and "kueue" in _reporter(e)]


def _reporter(event: JSON) -> str:
    """Who wrote an Event: core/v1's source.component, or events.k8s.io/v1's reportingController (read through core/v1
    as reportingComponent), which Kueue's recorder writes from v0.19."""
    return str((event.get("source") or {}).get("component") or event.get("reportingComponent") or "")


@contextlib.asynccontextmanager
async def job_webhooks(operator: Operator, kube: KubeClient, namespace: str, probe: JSON) -> AsyncIterator[None]:
    """Kueue's MPIJob webhooks and mpiop's GPU layout webhook (deploy/base/webhook.yaml) on `namespace`, both in
    effect, as in a cluster with Kueue and mpiop installed; `probe` is a total-GPU job of a queue the test's nodes
    can hold (dry runs of it tell when each webhook is in effect)."""
    await kube.patch(NAMESPACES, None, namespace, {"metadata": {"labels": {JOB_WEBHOOKS_LABEL: "true"}}})
    async with serving_layout_webhook(operator, kube, namespace, probe):

        async def suspended_by_kueue() -> bool:
            answer = await kube.request("POST", MPIJOBS.path(namespace), body=probe, query={"dryRun": "All"})
            return bool(answer["spec"]["runPolicy"].get("suspend"))

        await eventually(suspended_by_kueue, what="Kueue's MPIJob webhook in effect in the namespace")
        yield


def condition(workload: JSON, kind: str) -> JSON | None:
    """The Workload's condition of type `kind` (QuotaReserved, Admitted, ...), whatever its status."""
    return next((dict(c) for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


@contextlib.asynccontextmanager
async def kueue_queue(kube: KubeClient, namespace: str, quota: Mapping[str, str],
                      preemption: JSON | None = None) -> AsyncIterator[str]:
    """LocalQueue QUEUE in `namespace`, of a ClusterQueue `<namespace>-cq` with `quota` (and `preemption`) in a
    flavor of its own, both Active. Afterwards the namespace's jobs go first, and their Workloads (whose finalizer
    Kueue removes), while Kueue still runs: the queue and flavor, which Kueue keeps while in use, are then deleted
    at once."""
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    await kube.create(RESOURCE_FLAVORS, None, resource_flavor(flavor))
    await kube.create(CLUSTER_QUEUES, None, cluster_queue(cq, flavor, quota, preemption))
    await kube.create(LOCAL_QUEUES, namespace, local_queue(QUEUE, namespace, cq))

    async def active() -> bool:
        lq = await kube.get(LOCAL_QUEUES, namespace, QUEUE)
        return (c := condition(lq, "Active")) is not None and c["status"] == "True"

    await eventually(active, what=f"LocalQueue {QUEUE} Active")
    try:
        yield QUEUE
    finally:
        for job in (await kube.list(MPIJOBS, namespace))["items"]:
            with contextlib.suppress(ApiError):
                await kube.delete(MPIJOBS, namespace, job["metadata"]["name"])

        async def no_workloads() -> bool:
            return not (await kube.list(WORKLOADS, namespace))["items"]

        await eventually(no_workloads, what=f"the Workloads of {namespace} gone")
        for resource, name in ((CLUSTER_QUEUES, cq), (RESOURCE_FLAVORS, flavor)):
            await kube.delete(resource, None, name)
            await eventually(_absent(kube, resource, name), what=f"{name} deleted")


def _absent(kube: KubeClient, resource: Resource, name: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return await kube.get_or_none(resource, None, name) is None
    return probe


def conditions(workload: JSON) -> dict[str, str]:
    """The Workload's conditions as type -> "status reason"."""
    return {c["type"]: f"{c['status']} {c['reason']}" for c in (workload.get("status") or {}).get("conditions") or []}


async def cq_usage(kube: KubeClient, namespace: str) -> dict[str, dict[str, str]]:
    """The ClusterQueue's status.flavorsReservation and flavorsUsage, resource -> total, of its one flavor."""
    status = (await kube.get(CLUSTER_QUEUES, None, f"{namespace}-cq")).get("status") or {}
    return {key: {r["name"]: r["total"] for f in status.get(key) or [] for r in f["resources"]}
            for key in ("flavorsReservation", "flavorsUsage")}


@dataclass
class PodTimeline:
    """What happened to a namespace's pods, as the apiserver's watch told it, each with the seconds since the
    timeline began: `created`, `deleting` (deletionTimestamp set; the grace asked in `grace`) and `gone`."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str, str]] = field(default_factory=list)  # (seconds, what, pod), oldest first
    grace: dict[str, int | None] = field(default_factory=dict)  # pod -> deletionGracePeriodSeconds at its deletion
    _deleting: dict[str, bool] = field(default_factory=dict)  # each pod there now: whether it is being deleted

    def note(self, event: JSON) -> None:
        metadata = event["object"]["metadata"]
        name, now = metadata["name"], self.clock()
        if event["type"] == "DELETED":
            self._deleting.pop(name, None)
            self.events.append((now, "gone", name))
            return
        if name not in self._deleting:
            self._deleting[name] = False
            self.events.append((now, "created", name))
        if metadata.get("deletionTimestamp") and not self._deleting[name]:
            self._deleting[name] = True
            self.grace[name] = metadata.get("deletionGracePeriodSeconds")
            self.events.append((now, "deleting", name))

    def clock(self) -> float:
        """Seconds since the timeline began, to place a test's own step among the events."""
        return time.monotonic() - self.started

    def first(self, what: str, prefix: str) -> float | None:
        """When the first pod whose name starts with `prefix` was `what`."""
        return next((t for t, w, n in self.events if w == what and n.startswith(prefix)), None)

    def at(self, what: str, prefix: str) -> float:
        """first(), which must have happened."""
        found = self.first(what, prefix)
        assert found is not None, f"no pod {prefix}* {what} in the timeline: {self.lines()}"
        return found

    def lines(self) -> list[str]:
        return [f"{t:7.2f}s {what:8} {pod}" + (f" (grace {self.grace[pod]}s)" if what == "deleting" else "")
                for t, what, pod in self.events]


@contextlib.asynccontextmanager
async def pod_timeline(kube: KubeClient, namespace: str) -> AsyncIterator[PodTimeline]:
    """A PodTimeline of `namespace`'s pods from now on, its watch running in the background for the block."""
    timeline = PodTimeline()
    since = (await kube.list(PODS, namespace))["metadata"]["resourceVersion"]

    async def watch() -> None:
        nonlocal since
        while True:
            async for event in kube.watch(PODS, namespace, resource_version=since):
                if event["type"] == "BOOKMARK":
                    since = event["object"]["metadata"]["resourceVersion"]
                    continue
                since = event["object"]["metadata"]["resourceVersion"]
                timeline.note(event)

    task = asyncio.create_task(watch())
    try:
        yield timeline
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
