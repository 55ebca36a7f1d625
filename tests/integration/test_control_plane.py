"""The foundation: the control plane is real (watch works, garbage collection runs) and leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import socket

from devcluster.controlplane import ControlPlane
from devcluster.versions import KUBERNETES_VERSION
from mpiop.kube.client import CONFIGMAPS, SECRETS, KubeClient
from testkit.operator import eventually


async def test_apiserver_reports_the_pinned_version(kube: KubeClient) -> None:
    version = await kube.request("GET", "/version")
    assert version["gitVersion"] == KUBERNETES_VERSION


async def test_created_object_is_seen_through_a_watch(control_plane: ControlPlane, kube: KubeClient,
                                                      namespace: str) -> None:
    listed = await kube.list(CONFIGMAPS, namespace)
    seen: list[tuple[str, str]] = []
    watching = asyncio.Event()

    def answered(verb: str, resource: str, code: int, seconds: float) -> None:
        if verb == "WATCH" and code == 200:  # the answer's headers: the apiserver has set the watch up
            watching.set()

    watcher_client = await KubeClient.connect(str(control_plane.kubeconfig), qps=0, observer=answered)

    async def watch() -> None:
        async for event in watcher_client.watch(
            CONFIGMAPS, namespace, resource_version=listed["metadata"]["resourceVersion"]
        ):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["name"]))
            if event["type"] == "ADDED" and obj["metadata"]["name"] == "watched":
                assert obj["data"] == {"key": "value"}
                return

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(watching.wait(), timeout=30)
        await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "watched"}, "data": {"key": "value"}})
        await asyncio.wait_for(watcher, timeout=30)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await watcher_client.close()
    assert ("ADDED", "watched") in seen


async def test_garbage_collector_deletes_dependents_of_a_deleted_owner(
    kube: KubeClient, namespace: str
) -> None:
    owner = await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "owner"}})
    await kube.create(
        SECRETS,
        namespace,
        {
            "metadata": {
                "name": "dependent",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "stringData": {"k": "v"},
        },
    )
    await kube.delete(CONFIGMAPS, namespace, "owner", propagation="Background")

    async def dependent_deleted() -> bool:
        return await kube.get_or_none(SECRETS, namespace, "dependent") is None

    await eventually(dependent_deleted, timeout=60, what="the garbage collector to delete the dependent Secret")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stopping_a_control_plane_leaves_no_process_or_port() -> None:
    plane = ControlPlane(controller_manager=False)
    plane.start()
    pids, port, workdir = plane.pids(), plane.api_port, plane.workdir
    assert pids and all(_alive(p) for p in pids)
    assert plane.kubectl("get", "--raw", "/readyz").strip() == "ok"
    plane.stop()
    assert not any(_alive(p) for p in pids)
    assert workdir is not None and not workdir.exists()
    with socket.socket() as sock:  # the apiserver's port is free again
        sock.bind(("127.0.0.1", port))
