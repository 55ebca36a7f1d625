"""The foundation: the control plane is real (watch works, garbage collection runs) and leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import socket
import time

from devcluster.controlplane import ControlPlane
from devcluster.versions import KUBERNETES_VERSION
from mpiop.kube.client import CONFIGMAPS, SECRETS, ApiError, KubeClient


async def test_apiserver_reports_the_pinned_version(kube: KubeClient) -> None:
    version = await kube.request("GET", "/version")
    assert version["gitVersion"] == KUBERNETES_VERSION


async def test_created_object_is_seen_through_a_watch(kube: KubeClient, namespace: str) -> None:
    listed = await kube.list(CONFIGMAPS, namespace)
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for event in kube.watch(
            CONFIGMAPS, namespace, resource_version=listed["metadata"]["resourceVersion"]
        ):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["name"]))
            if event["type"] == "ADDED" and obj["metadata"]["name"] == "watched":
                assert obj["data"] == {"key": "value"}
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)
    await kube.create(CONFIGMAPS, namespace, {"metadata": {"name": "watched"}, "data": {"key": "value"}})
    await asyncio.wait_for(watcher, timeout=30)
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await kube.get(SECRETS, namespace, "dependent")
        except ApiError as error:
            assert error.not_found
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the garbage collector did not delete the dependent Secret within 60 s")


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
