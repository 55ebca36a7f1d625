"""A finished job's workers go in one DELETE collection, and a pod the apiserver's answer did not list goes by
name: the collection is listed from the apiserver's watch cache, which may lag (with several apiservers,
behind the one the operator watches). The lag is injected at the client's edge: its answer loses one name."""

from __future__ import annotations

from typing import Any, ClassVar

from devcluster.controlplane import ControlPlane
from mpiop.kube.client import KubeClient, Resource
from tests.integration.operator import Cluster, mpijob, running_operator
from tests.integration.test_leader import drive_to_success

LAGGING = "lag-worker-1"


class LaggingCacheClient(KubeClient):
    """The apiserver deletes what it matched; its answer says it did not list LAGGING."""

    deletions: ClassVar[list[str]] = []  # "collection", or the name of a pod deleted by name

    async def delete_collection(self, resource: Resource, namespace: str, **selectors: Any) -> set[str]:
        self.deletions.append("collection")
        return await super().delete_collection(resource, namespace, **selectors) - {LAGGING}

    async def delete(self, resource: Resource, namespace: str | None, name: str, **options: Any) -> Any:
        self.deletions.append(name)
        return await super().delete(resource, namespace, name, **options)


async def test_a_pod_the_collection_did_not_list_is_deleted_by_name(control_plane: ControlPlane,
                                                                   cluster: Cluster) -> None:
    name = "lag"
    LaggingCacheClient.deletions.clear()
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, client_class=LaggingCacheClient):
        await cluster.create_job(mpijob(name, workers=3))
        await drive_to_success(cluster, name, workers=3)
    print(f"\npod deletions: {LaggingCacheClient.deletions}")
    assert LaggingCacheClient.deletions == ["collection", LAGGING]  # then the one it did not list, by name
