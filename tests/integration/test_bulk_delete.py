"""A finished job's workers go in one DELETE collection, and a pod the apiserver's answer did not list goes by
name: the collection is listed from the apiserver's watch cache, which may lag (with several apiservers,
behind the one the operator watches). The lag is injected at the client's edge: its answer loses one name."""

from __future__ import annotations

from typing import Any

from devcluster.controlplane import ControlPlane
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import PODS, KubeClient, Resource
from mpiop.kube.codec import decode
from testkit.operator import Cluster, drive_to_success, mpijob, running_operator
from testkit.rbac import Request, recorder

LAGGING = "lag-worker-1"


class LaggingCacheClient(KubeClient):
    """The apiserver deletes what it matched; its answer says it did not list LAGGING (an answer no request hook
    can change, hence the subclass)."""

    async def delete_collection(self, resource: Resource, namespace: str, **selectors: Any) -> set[str]:
        return await super().delete_collection(resource, namespace, **selectors) - {LAGGING}


async def test_a_pod_the_collection_did_not_list_is_deleted_by_name(control_plane: ControlPlane,
                                                                   cluster: Cluster) -> None:
    name = "lag"
    requests: list[Request] = []
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, client_class=LaggingCacheClient,
                                on_request=recorder(requests)):
        await cluster.create_job(mpijob(name, workers=3))
        await drive_to_success(cluster, name, workers=3)
    deletions = [(verb, pod) for verb, _, resource, pod in requests
                 if resource == "pods" and verb in ("delete", "deletecollection")]
    print(f"\npod deletions: {deletions}")
    assert deletions == [("deletecollection", ""), ("delete", LAGGING)]  # then the one it did not list, by name


class AnswerRecordingClient(KubeClient):
    """Keeps the answer of every DELETE it sends, decoded whole (a request hook sees no answers; delete_collection
    itself decodes only the names)."""

    def __init__(self, access: ClusterAccess) -> None:
        super().__init__(access)
        self.answers: list[dict[str, Any]] = []

    async def request_raw(self, method: str, path: str, **options: Any) -> bytes:
        raw = await super().request_raw(method, path, **options)
        if method == "DELETE":
            self.answers.append(decode(raw))
        return raw


async def test_a_collection_deletes_what_its_labels_match_and_answers_their_metadata_only(
        kube: KubeClient, namespace: str) -> None:
    """Against the real apiserver: the labelled pods go, the other stays, and the answer names exactly them
    without their specs (a PartialObjectMetadataList), which is all the operator reads of it."""
    def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}

    for name in ("a-0", "a-1", "a-2"):
        await kube.create(PODS, namespace, pod(name, {"group": "a"}))
    await kube.create(PODS, namespace, pod("b-0", {"group": "b"}))
    client = AnswerRecordingClient(kube.access)
    try:
        deleted = await client.delete_collection(PODS, namespace, label_selector="group=a")
    finally:
        await client.close()
    [answer] = client.answers
    print(f"\ndeleted {sorted(deleted)}; answer kind {answer.get('kind')}, item keys "
          f"{sorted({k for item in answer['items'] for k in item})}")
    assert deleted == {"a-0", "a-1", "a-2"}
    assert answer["kind"] == "PartialObjectMetadataList"
    assert all("spec" not in item and "status" not in item for item in answer["items"])
    left = {p["metadata"]["name"] for p in (await kube.list(PODS, namespace))["items"]
            if not p["metadata"].get("deletionTimestamp")}
    assert left == {"b-0"}
