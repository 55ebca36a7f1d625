"""A failed attempt's logs through the real apiserver: ConfigMap `<job>-attempt-<n>` saved before the restart,
named by the condition and the Event, owned by the job, the last --kept-attempts kept.

No kubelet runs here, so every log is recorded as not readable (no container ever started, or the pod has no
node): what shows is that an unreadable log is recorded as such and does not hold the restart up. The
logs themselves are read on the real node (e2e/test_evidence.py).
"""

from __future__ import annotations

import asyncio
import time

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.controller.logreads import READ_SECONDS
from mpiop.kube.client import CONFIGMAPS, EVENTS, NODES, PODS
from testkit.operator import Cluster, Operator, eventually, mpijob, running_operator, start_pods


async def _restarts(cluster: Cluster, name: str) -> int:
    job = await cluster.job(name)
    return int(((job or {}).get("status") or {}).get("restartCount") or 0)


async def _attempt_maps(cluster: Cluster) -> dict[str, JSON]:
    listed = await cluster.kube.list(CONFIGMAPS, cluster.ns, labelSelector="mpiop.kubeflow.org/attempt")
    return {m["metadata"]["name"]: m for m in listed["items"]}


async def test_each_failed_attempt_leaves_its_logs_the_last_two_kept(control_plane: ControlPlane,
                                                                      cluster: Cluster) -> None:
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, kept_attempts=2):
        created = await cluster.create_job(mpijob("ev", workers=2))
        for attempt in range(3):
            launcher = f"ev-launcher-{attempt}" if attempt else "ev-launcher"
            await start_pods(cluster, "ev", 2, launcher=launcher, running=False)
            await cluster.set_phase("ev-worker-1", "Failed", exit_code=137, reason="OOMKilled")

            async def restarted(want: int = attempt + 1) -> bool:
                return await _restarts(cluster, "ev") == want

            await eventually(restarted, what=f"restart {attempt + 1}")
            restarting = await cluster.condition("ev", "Restarting")
            assert restarting is not None
            assert f"; the attempt's logs are kept in ConfigMap ev-attempt-{attempt}" in restarting["message"]
            saved = (await _attempt_maps(cluster)).get(f"ev-attempt-{attempt}")
            assert saved is not None, "saved before the restart was written"
            if attempt == 0:
                first = saved
                print("ev-attempt-0:", {k: v[:120] for k, v in saved["data"].items()})

        async def first_gone() -> bool:  # deleted just after the restart, off its path
            return sorted(await _attempt_maps(cluster)) == ["ev-attempt-1", "ev-attempt-2"]

        await eventually(first_gone, what="--kept-attempts 2: only the last two attempts' ConfigMaps")

        async def event_names_it() -> bool:  # Events are sent in the background, just after the status
            events = await cluster.kube.list(EVENTS, cluster.ns)
            return any("ConfigMap ev-attempt-0" in e["message"] for e in events["items"]
                       if e["reason"] == "MPIJobRestarting")

        await eventually(event_names_it, what="the MPIJobRestarting Event naming ev-attempt-0")

    meta = first["metadata"]
    assert meta["labels"]["training.kubeflow.org/job-name"] == "ev"
    assert meta["labels"]["mpiop.kubeflow.org/attempt"] == "0"
    assert [(r["kind"], r["uid"], r["controller"]) for r in meta["ownerReferences"]] == [
        ("MPIJob", created["metadata"]["uid"], True)]
    data = first["data"]
    assert sorted(data) == ["ev-launcher.log", "ev-worker-1.main.log", "failure"]
    assert data["failure"].startswith(f"MPIJob {cluster.ns}/ev is restarting (restart 1 of backoffLimit 6): "
                                      "ev-worker-1 (rank 1) container main OOMKilled exit 137")
    assert data["ev-launcher.log"] == "(not readable: no container of this pod started)"
    assert data["ev-worker-1.main.log"] == "(not readable: the pod was never scheduled to a node)"


async def test_a_node_that_does_not_answer_delays_the_restart_by_one_bound(operator: Operator,
                                                                           cluster: Cluster) -> None:
    """The launcher and the failed worker are on a Node whose kubelet (a socket here that accepts and never
    answers) hangs every log read: both logs are recorded as not readable, each read once, although the failure
    report and the saving both want the worker's; the restart waits one READ_SECONDS, not one per reader."""
    held: list[asyncio.StreamWriter] = []

    async def accept_and_hang(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    kubelet = await asyncio.start_server(accept_and_hang, "127.0.0.1", 0)
    port = kubelet.sockets[0].getsockname()[1]
    node = f"{cluster.ns}-silent"
    await cluster.kube.create(NODES, None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    await cluster.kube.patch(NODES, None, node, {"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}, subresource="status")
    try:
        await cluster.create_job(mpijob("slow", workers=1))
        await start_pods(cluster, "slow", 1, running=False, nodes={"slow-launcher": node, "slow-worker-0": node})
        await cluster.kube.patch(PODS, cluster.ns, "slow-launcher", {"status": {"containerStatuses": [{
            "name": "main", "ready": True, "restartCount": 0, "image": "img", "imageID": "",
            "state": {"running": {}}}]}}, subresource="status")
        failed = time.monotonic()
        await cluster.set_phase("slow-worker-0", "Failed", exit_code=1)

        async def restarted() -> bool:
            return await _restarts(cluster, "slow") == 1

        await eventually(restarted, timeout=4 * READ_SECONDS, what="the restart")
        took = time.monotonic() - failed
        data = (await _attempt_maps(cluster))["slow-attempt-0"]["data"]
        saved = [data["slow-launcher.main.log"], data["slow-worker-0.main.log"]]
        print(f"\nrestart {took:.1f} s after the failure ({len(held)} log reads reached the node); logs: {saved}")
        for text in saved:  # ours, or the apiserver's own 10 s TLS handshake timeout when it comes first
            assert text == f"(not readable: no answer within {READ_SECONDS:g} s)" or (
                text.startswith("(not readable: ") and "timeout" in text), text
        assert len(held) == 2, "each log read once, whoever wants it"
        assert took < READ_SECONDS + 5, "the reads ran at once: one bound, not the report's and then the saving's"
    finally:
        kubelet.close()
        for writer in held:
            writer.close()
        await cluster.kube.delete(NODES, None, node)
