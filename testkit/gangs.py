"""Gang scheduling on a simulated cluster with room for one job: the helpers of
tests/integration/test_gang_kubernetes.py (Kubernetes' own gangs).

Two KWOK nodes of 8 GPUs and jobs of 4 workers x 4 GPUs: the workers' template holds a scheduling gate that a test
lifts worker by worker, alternating between two jobs, the order in which two jobs submitted at once reach the
scheduler, made repeatable. Without gangs each job then gets 2 of its 4 workers and neither runs (the deadlock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from devcluster.simulated import FINISH_LABEL
from mpiop.api.raw import JSON
from mpiop.kube.client import PODS, KubeClient
from testkit.namespaces import create_namespace, delete_namespace
from testkit.operator import Cluster, Operator, eventually, mpijob
from testkit.rbac import Request, allows, rules

GATE = "sim.mpiop.dev/arrival"
PODGROUP_VERBS = {"list", "watch", "create", "patch", "delete"}


@asynccontextmanager
async def new_namespace(kube: KubeClient, name: str) -> AsyncIterator[Cluster]:
    """A namespace for one test, deleted with its pods afterwards: the next test gets every GPU back."""
    try:
        yield Cluster(kube, await create_namespace(kube, name))
    finally:
        await delete_namespace(kube, name, wait=120)


def gpu_job(name: str, workers: int = 4, gated: bool = True) -> JSON:
    job = mpijob(name, workers=workers, gpus=4)
    if gated:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
    return job


def workers(name: str, count: int = 4) -> list[str]:
    return [f"{name}-worker-{i}" for i in range(count)]


async def bound(cluster: Cluster, job: str) -> list[str]:
    """The job's pods a scheduler has bound to a node."""
    return sorted(n for n, p in (await cluster.pods()).items()
                  if n.startswith(f"{job}-") and p["spec"].get("nodeName"))


async def all_pods(cluster: Cluster, count: int) -> bool:
    return len(await cluster.pods()) == count


async def lift_gates_alternately(cluster: Cluster, first: str, second: str,
                                 settle: Callable[[str], Awaitable[object]] | None = None) -> None:
    """Lift the workers' gates in the order A0 B0 A1 B1 ...; `settle(pod)` waits after each."""
    for a, b in zip(workers(first), workers(second), strict=True):
        for pod in (a, b):
            await cluster.kube.patch(PODS, cluster.ns, pod, {"spec": {"schedulingGates": None}})
            if settle is not None:
                await settle(pod)


async def running_false(cluster: Cluster, name: str) -> JSON | None:
    job = await cluster.job(name)
    return next((c for c in ((job or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == "Running" and c["status"] == "False"), None)


async def two_jobs_without_gangs(cluster: Cluster, operator: Operator) -> dict[str, list[str]]:
    """Jobs a and b made, their gates lifted alternately, each pod waited for until bound or refused: once nothing
    changes any more, each has its launcher and 2 of its 4 workers bound and neither runs (the deadlock)."""
    await cluster.create_job(gpu_job("a"))
    await cluster.create_job(gpu_job("b"))
    await eventually(lambda: all_pods(cluster, 10), what="both jobs' pods")

    async def placed_or_refused(pod: str) -> bool:
        found = await cluster.pod(pod)
        conditions = ((found or {}).get("status") or {}).get("conditions") or []
        return bool(found and (found["spec"].get("nodeName") or any(
            c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
            for c in conditions)))

    await lift_gates_alternately(cluster, "a", "b",
                                 settle=lambda pod: eventually(lambda: placed_or_refused(pod), what=pod))
    await operator.settle()  # nothing changes any more
    placed = {job: await bound(cluster, job) for job in ("a", "b")}
    print(f"\nwithout gang scheduling, bound: {placed}")
    assert placed == {"a": ["a-launcher", "a-worker-0", "a-worker-1"],
                      "b": ["b-launcher", "b-worker-0", "b-worker-1"]}
    assert not await cluster.condition("a", "Running") and not await cluster.condition("b", "Running")
    return placed


async def winner_and_loser(cluster: Cluster) -> tuple[str, str]:
    """Once one of jobs a and b is Running: which, and the other; the winner has every pod bound."""
    async def one_running() -> str | None:
        for job in ("a", "b"):
            if await cluster.condition(job, "Running"):
                return job
        return None

    winner = await eventually(one_running, 60, "one job Running")
    assert await bound(cluster, winner) == sorted([f"{winner}-launcher", *workers(winner)])
    return winner, "b" if winner == "a" else "a"


async def loser_waits_then_runs(cluster: Cluster, winner: str, loser: str) -> float:
    """The loser warned of why it waits and has no pod bound through a 5 s window while the winner runs; then the
    winner's launcher succeeds and the loser runs whole: the seconds from the winner's success to the loser Running."""
    events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
    assert any(e["reason"] == "PodGroupUnschedulable" and e["involvedObject"]["name"] == loser
               for e in events["items"])
    watched_until = time.monotonic() + 5
    while time.monotonic() < watched_until:
        assert await bound(cluster, loser) == []
        await asyncio.sleep(0.25)  # poll interval, through a 5 s window in which nothing may be bound
    finish = {"metadata": {"labels": {FINISH_LABEL: "Succeeded"}}}
    await cluster.kube.patch(PODS, cluster.ns, f"{winner}-launcher", finish)
    await eventually(lambda: cluster.condition(winner, "Succeeded"), 60, f"{winner} Succeeded")
    started = time.monotonic()
    await eventually(lambda: cluster.condition(loser, "Running"), 120, f"{loser} Running after {winner}")
    after = time.monotonic() - started
    assert await bound(cluster, loser) == sorted([f"{loser}-launcher", *workers(loser)])
    assert await running_false(cluster, loser) is None
    return after


def podgroup_requests_check(requests: list[Request], objects: list[JSON], group: str) -> set[str]:
    """That every request was granted by the RBAC `objects` and their podgroups rule is of `group` only; the podgroups
    verbs used (discovery, the start-up check that the API is served, is open to every authenticated user)."""
    granted = rules(objects)
    ungranted = {r for r in requests if r[2] and not any(allows(rule, r) for rule in granted)}
    assert not ungranted, f"used but not granted: {sorted(ungranted)}"
    podgroup_rule = next(rule for rule in granted if "podgroups" in rule["resources"])
    assert podgroup_rule["apiGroups"] == [group] and set(podgroup_rule["verbs"]) == PODGROUP_VERBS
    return {r[0] for r in requests if r[1:3] == (group, "podgroups")}
