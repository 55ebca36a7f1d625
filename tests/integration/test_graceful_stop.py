"""Graceful stops through the real apiserver: a suspend, an eviction (DisruptionTarget) and activeDeadlineSeconds
delete the launcher first, with the stop grace, and the workers only once it ended or the grace passed; a failure
restart deletes every pod at once; a grace above the pods' terminationGracePeriodSeconds is capped with a Warning.

The test plays the kubelet: the pods are bound to a Node object with no kubelet, so a graceful deletion leaves them
terminating until the test finishes it (the launcher's mpirun ending) or never (the grace passes). Every DELETE the
operator sends is noted as it leaves (the client's request hook), so the order is the order on the wire.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.client import EVENTS, MPIJOBS, PODS
from mpiop.names import STOP_GRACE_ANNOTATION
from mpiop.policies import graceful_stop
from testkit.operator import Cluster, eventually, mpijob, running_operator


@pytest.fixture
async def node(cluster: Cluster) -> AsyncIterator[str]:
    async with cluster.bare_node() as name:
        yield name


class Deletions:
    """The pod DELETEs the operator sent, in order: (pod name, monotonic time); the grace is in the body, and read
    from the pod (deletionGracePeriodSeconds)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    def __call__(self, method: str, path: str, query: Mapping[str, Any]) -> None:
        if method == "DELETE" and "/pods/" in path:
            self.sent.append((path.rsplit("/", 1)[1], time.monotonic()))
        elif method == "DELETE" and path.endswith("/pods"):  # a DELETE collection: every pod it matches
            self.sent.append(("<collection>", time.monotonic()))

    def names(self) -> list[str]:
        return [name for name, _ in self.sent]


async def start(cluster: Cluster, node: str, name: str, workers: int = 2, attempt_launcher: str = "") -> list[str]:
    """Wait for the job's pods, bind them to `node` (so graceful deletions stay pending) and run them."""
    launcher = attempt_launcher or f"{name}-launcher"
    pods = [launcher, *(f"{name}-worker-{i}" for i in range(workers))]

    async def made() -> bool:
        found = await cluster.pods()
        return all(p in found and not found[p]["metadata"].get("deletionTimestamp") for p in pods)

    await eventually(made, what=f"{name}'s pods")
    for pod in pods:
        await cluster.bind(pod, node)
    await cluster.run_all(pods)
    await eventually(lambda: cluster.condition(name, "Running"), what=f"{name} Running")
    return pods


async def terminating(cluster: Cluster, name: str) -> bool:
    pod = await cluster.pod(name)
    return pod is not None and bool(pod["metadata"].get("deletionTimestamp"))


async def stopping(cluster: Cluster, name: str) -> JSON | None:
    job = await cluster.job(name)
    for condition in ((job or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == graceful_stop.STOPPING:
            return dict(condition)
    return None


async def end(cluster: Cluster, pod: str) -> None:
    """The kubelet's part: the pod's containers exited, it is removed."""
    await cluster.kube.delete(PODS, cluster.ns, pod, grace_period_seconds=0)


async def grace_of(cluster: Cluster, name: str) -> int | None:
    pod = await cluster.pod(name)
    return None if pod is None else pod["metadata"].get("deletionGracePeriodSeconds")


async def events(cluster: Cluster, reason: str) -> list[JSON]:
    return [e for e in (await cluster.kube.list(EVENTS, cluster.ns))["items"] if e["reason"] == reason]


async def test_suspend_stops_the_launcher_first_and_a_resume_waits_for_the_old_pods(
        control_plane: ControlPlane, cluster: Cluster, node: str) -> None:
    sent = Deletions()
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, stop_grace_seconds=25,
                                on_request=sent) as operator:
        manifest = mpijob("sus", workers=2)
        manifest["metadata"]["annotations"] = {STOP_GRACE_ANNOTATION: "600"}  # above the pods' 30 s: capped
        await cluster.create_job(manifest)
        pods = await start(cluster, node, "sus")
        await cluster.kube.patch(MPIJOBS, cluster.ns, "sus", {"spec": {"runPolicy": {"suspend": True}}})

        await eventually(lambda: terminating(cluster, "sus-launcher"), what="the launcher told (deleted) first")
        launcher = await cluster.pod("sus-launcher")
        assert launcher is not None and launcher["metadata"]["deletionGracePeriodSeconds"] == 30
        condition = await eventually(lambda: stopping(cluster, "sus"), what="Stopping")
        print("Stopping:", condition["message"])
        assert (condition["status"], condition["reason"]) == ("True", "Suspended")
        assert "stop grace 30s, annotation mpiop.kubeflow.org/stop-grace-seconds; annotation " \
               "mpiop.kubeflow.org/stop-grace-seconds=600 is capped at 30" in condition["message"]
        [capped] = await eventually(lambda: events(cluster, "StopGraceCapped"), what="the cap's Warning")
        print("Warning:", capped["message"])
        assert capped["type"] == "Warning" and "capped at 30, the pods' terminationGracePeriodSeconds" in \
            capped["message"]
        await operator.settle()
        assert not [p for p in pods[1:] if await terminating(cluster, p)], "no worker deleted while mpirun runs"
        assert sent.names() == ["sus-launcher"]

        # Resumed while the stop is under way: nothing new is made beside the old attempt's pods.
        await cluster.kube.patch(MPIJOBS, cluster.ns, "sus", {"spec": {"runPolicy": {"suspend": False}}})
        await operator.settle()
        assert set(await cluster.pods()) == set(pods)
        assert sent.names() == ["sus-launcher"]

        old_uids = {n: p["metadata"]["uid"] for n, p in (await cluster.pods()).items()}
        await end(cluster, "sus-launcher")  # mpirun ended (the ranks checkpointed)
        for worker in pods[1:]:
            await eventually(functools.partial(terminating, cluster, worker), what=f"{worker} deleted after")
        ended = await eventually(lambda: _false(cluster, "sus"), what="Stopping=False")
        print("Stopped:", ended["message"])
        assert ended["reason"] == "LauncherEnded"
        assert ended["message"].startswith("MPIJob " + cluster.ns + "/sus stopped gracefully (Suspended) in ")
        assert sent.names()[0] == "sus-launcher" and set(sent.names()[1:]) <= {*pods[1:], "<collection>"}
        [told] = await events(cluster, "GracefulStop")
        assert told["type"] == "Normal"
        await operator.settle()
        assert set(await cluster.pods()) == set(pods[1:]), "the resumed attempt waits for the old workers"

        for worker in pods[1:]:
            await end(cluster, worker)
        await start(cluster, node, "sus")
        now = {n: p["metadata"]["uid"] for n, p in (await cluster.pods()).items()}
        assert not set(now.values()) & set(old_uids.values()), "only new pods in the resumed attempt"


async def _false(cluster: Cluster, name: str) -> JSON | None:
    condition = await stopping(cluster, name)
    return condition if condition is not None and condition["status"] == "False" else None


async def test_an_eviction_stops_the_launcher_first_and_the_grace_bounds_the_wait(
        control_plane: ControlPlane, cluster: Cluster, node: str) -> None:
    sent = Deletions()
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, stop_grace_seconds=4,
                                on_request=sent) as operator:
        await cluster.create_job(mpijob("ev", workers=2, run_policy={"backoffLimit": 0}))
        pods = await start(cluster, node, "ev")
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": "ev-worker-1", "namespace": cluster.ns}}
        await cluster.kube.request("POST", PODS.path(cluster.ns, "ev-worker-1", "eviction"), body=eviction)
        started = time.monotonic()

        await eventually(lambda: terminating(cluster, "ev-launcher"), what="the launcher told first")
        condition = await eventually(lambda: stopping(cluster, "ev"), what="Stopping")
        assert (condition["status"], condition["reason"]) == ("True", "Disrupted")
        assert await cluster.condition("ev", "Restarting") is not None
        assert not await terminating(cluster, "ev-worker-0"), "the surviving worker's ranks may still checkpoint"
        assert sent.names() == ["ev-launcher"]
        assert await grace_of(cluster, "ev-launcher") == 4

        # The launcher never ends (a shell as its PID 1 ignores SIGTERM): the workers go when the grace passed.
        await eventually(lambda: terminating(cluster, "ev-worker-0"), what="the worker deleted at the deadline")
        waited = next(t for n, t in sent.sent if n in ("ev-worker-0", "<collection>")) - started
        print(f"worker deleted {waited:.1f}s after the eviction (grace 4s)")
        assert waited >= 3, "not before the grace passed"  # the deadline has whole seconds: 3 < grace <= 4
        ended = await eventually(lambda: _false(cluster, "ev"), what="Stopping=False")
        assert ended["reason"] == "GraceExpired"
        [told] = await events(cluster, "GracefulStop")
        assert told["type"] == "Warning"

        # The next attempt comes once the old pods are gone.
        for pod in pods:
            await end(cluster, pod)
        await start(cluster, node, "ev", attempt_launcher="ev-launcher-1")
        await operator.settle()


async def test_the_deadline_stops_the_launcher_first(control_plane: ControlPlane, cluster: Cluster, node: str) -> None:
    sent = Deletions()
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, stop_grace_seconds=20,
                                on_request=sent) as operator:
        await cluster.create_job(mpijob("dl", workers=1, run_policy={"activeDeadlineSeconds": 3,
                                                                      "cleanPodPolicy": "Running"}))
        pods = await start(cluster, node, "dl", workers=1)
        await eventually(lambda: cluster.condition("dl", "Failed"), what="DeadlineExceeded")
        await eventually(lambda: terminating(cluster, "dl-launcher"), what="the launcher told first")
        condition = await eventually(lambda: stopping(cluster, "dl"), what="Stopping")
        assert (condition["status"], condition["reason"]) == ("True", "DeadlineExceeded")
        await operator.settle()
        assert not await terminating(cluster, "dl-worker-0")
        assert sent.names() == ["dl-launcher"]

        await end(cluster, "dl-launcher")
        await eventually(lambda: terminating(cluster, "dl-worker-0"), what="the worker deleted after the launcher")
        ended = await eventually(lambda: _false(cluster, "dl"), what="Stopping=False")
        assert ended["reason"] == "LauncherEnded"
        assert sent.names()[0] == "dl-launcher" and len(pods) == 2


async def test_a_failure_restart_is_not_delayed(control_plane: ControlPlane, cluster: Cluster, node: str) -> None:
    sent = Deletions()
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, stop_grace_seconds=20,
                                on_request=sent) as operator:
        await cluster.create_job(mpijob("fr", workers=2, run_policy={"backoffLimit": 2}))
        await start(cluster, node, "fr")
        await cluster.set_phase("fr-worker-1", "Failed", exit_code=1)
        await eventually(lambda: cluster.condition("fr", "Restarting"), what="Restarting")
        for pod in ("fr-launcher", "fr-worker-0"):
            await eventually(functools.partial(terminating, cluster, pod), what=f"{pod} deleted at once")
        await operator.settle()
        assert await stopping(cluster, "fr") is None
        assert [await grace_of(cluster, p) for p in ("fr-launcher", "fr-worker-0")] == [30, 30], "the pods' own"
