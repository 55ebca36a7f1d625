"""Kueue's objects for the tests that run its controller (devcluster/kueue.py): a ResourceFlavor, a ClusterQueue
with quota in it, a LocalQueue, and the Workloads Kueue makes from a job, read in kueue.x-k8s.io/v1beta2."""

from __future__ import annotations

from collections.abc import Mapping

from devcluster.kueue import API_VERSION, QUEUE_NAME_LABEL
from mpiop.api.raw import JSON
from mpiop.kube.client import KubeClient, Resource

__all__ = ["CLUSTER_QUEUES", "LOCAL_QUEUES", "QUEUE_NAME_LABEL", "RESOURCE_FLAVORS", "WORKLOADS", "cluster_queue",
           "condition", "local_queue", "resource_flavor", "workload_of"]

_GROUP, _VERSION = API_VERSION.split("/")
RESOURCE_FLAVORS = Resource(_GROUP, _VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = Resource(_GROUP, _VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(_GROUP, _VERSION, "localqueues", "LocalQueue")
WORKLOADS = Resource(_GROUP, _VERSION, "workloads", "Workload")


def resource_flavor(name: str) -> JSON:
    """A flavor without node labels: Kueue injects no node selector into the pods it admits."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}


def cluster_queue(name: str, flavor: str, quota: Mapping[str, str]) -> JSON:
    """Every namespace's jobs may queue here; `quota`: resource name -> nominal quota, all in `flavor`."""
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": list(quota), "flavors": [{
            "name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


async def workload_of(kube: KubeClient, namespace: str, kind: str, name: str) -> JSON | None:
    """The Workload Kueue made for the object `kind`/`name` (the one it owns), if any."""
    for workload in (await kube.list(WORKLOADS, namespace))["items"]:
        if any(o["kind"] == kind and o["name"] == name for o in workload["metadata"].get("ownerReferences") or []):
            return dict(workload)
    return None


def condition(workload: JSON, kind: str) -> JSON | None:
    """The Workload's condition of type `kind` (QuotaReserved, Admitted, ...), whatever its status."""
    return next((dict(c) for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)
