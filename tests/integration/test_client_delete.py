"""KubeClient.delete_if_present against the real apiserver: gone already (404) and a newer object of the name
(409, the uid precondition) are success and leave the newer object alone; any other refusal is raised."""

from __future__ import annotations

import pytest

from mpiop.kube.client import CONFIGMAPS, ApiError, KubeClient

pytestmark = pytest.mark.integration


async def test_delete_if_present(kube: KubeClient, namespace: str) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}}
    first = await kube.create(CONFIGMAPS, namespace, body)
    answer = await kube.delete_if_present(CONFIGMAPS, namespace, "cm", uid=first["metadata"]["uid"])
    assert answer is not None
    assert await kube.delete_if_present(CONFIGMAPS, namespace, "cm") is None  # 404

    newer = await kube.create(CONFIGMAPS, namespace, body)
    assert await kube.delete_if_present(CONFIGMAPS, namespace, "cm", uid=first["metadata"]["uid"]) is None  # 409
    kept = await kube.get_or_none(CONFIGMAPS, namespace, "cm")
    assert kept is not None and kept["metadata"]["uid"] == newer["metadata"]["uid"]

    with pytest.raises(ApiError) as refused:
        await kube.delete_if_present(CONFIGMAPS, namespace, "cm", propagation="Sideways")
    assert refused.value.status in (400, 422)
