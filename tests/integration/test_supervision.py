"""A background task that dies after the caches synced: /healthz fails, naming it, and the process exits 1.

The process's own pieces, in-process against the real apiserver: the Manager and its Supervisor, the probe
server with `process.health_checks`, and `process.supervise` (whose return value `mpiop run` exits with).
The fault goes in through the informer's own seam: a change handler that raises, as a bug in one would.
"""

from __future__ import annotations

import asyncio

import aiohttp
from structlog.testing import capture_logs

from devcluster.controlplane import ControlPlane, free_port
from mpiop import process
from mpiop.api.raw import JSON
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.controller.supervisor import Supervisor
from mpiop.kube.client import KubeClient
from mpiop.server import Servers, health_app
from testkit.operator import Cluster, mpijob


async def _get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_an_informer_that_raises_after_sync_fails_healthz_and_exits_1(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    client = await KubeClient.connect(str(control_plane.kubeconfig), qps=0, burst=100)
    manager = Manager(client, ManagerConfig(namespace=cluster.ns, workers=2), Supervisor())
    servers, port = Servers(), free_port()
    await servers.start(health_app(process.health_checks(manager, None)), f"127.0.0.1:{port}", "health probes")
    stop = asyncio.Event()
    try:
        with capture_logs() as logs:
            run = asyncio.create_task(process.supervise(manager, None, stop))
            await asyncio.wait_for(manager.synced.wait(), 30)
            assert await _get(port, "/healthz") == (200, "ok")
            assert (await _get(port, "/readyz"))[0] == 200

            def bug(old: JSON | None, new: JSON | None) -> None:
                raise RuntimeError("injected: a change handler's bug")

            manager.caches.mpijobs.handlers.append(bug)
            await cluster.create_job(mpijob("trigger", workers=1))
            code = await asyncio.wait_for(run, 30)
        assert code == 1, "mpiop run exits with this code"
        assert stop.is_set()
        status, text = await _get(port, "/healthz")
        assert status == 500
        assert "[-]background-tasks failed: informer-mpijobs died: RuntimeError: injected" in text, text
        assert (await _get(port, "/readyz"))[0] == 500
        died = [e for e in logs if e["event"] == "background task ended: failing /healthz and stopping the process"]
        assert [e["task"] for e in died] == ["informer-mpijobs"] and died[0]["log_level"] == "error"
        print(f"\n/healthz {status}: {text.strip()}")
    finally:
        stop.set()
        await servers.stop()
        await client.close()
