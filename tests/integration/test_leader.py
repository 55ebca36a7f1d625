"""Two `mpiop run --leader-elect` processes against the real apiserver: one reconciles, a killed leader is
replaced within 20 s, no object is ever written by both, and SIGTERM releases the lease. Each process is told
its pod (POD_NAME, as the Deployment's downward API does; a kubelet-less pod here): the one serving the status
endpoint, the leader, labels its pod for the status Service, and a process starting in a pod clears the label. Both
serve under one CA (kept in a Secret by whichever started first), so the jobs' ConfigMaps keep theirs across the
handover."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.desired.status_report import CA_KEY
from mpiop.kube.client import CONFIGMAPS, EVENTS, MPIJOBS, PODS, SECRETS, SERVICES
from mpiop.leader import LEASES
from mpiop.names import STATUS_ENDPOINT_LABEL, STATUS_ENDPOINT_SERVING
from testkit.operator import Cluster, drive_to_success, eventually, mpijob
from testkit.process import OperatorProcess

WRITES = ("POST", "PUT", "PATCH", "DELETE")


async def _writers(cluster: Cluster, managers: set[str]) -> dict[str, set[str]]:
    """Every object of the namespace (but the Lease): which of `managers` wrote it."""
    found: dict[str, set[str]] = {}
    for resource in (MPIJOBS, PODS, CONFIGMAPS, SECRETS, SERVICES, EVENTS):
        for obj in (await cluster.kube.list(resource, cluster.ns))["items"]:
            wrote = {m.get("manager") for m in obj["metadata"].get("managedFields") or []} & managers
            found[f"{resource.plural}/{obj['metadata']['name']}"] = {str(m) for m in wrote}
    return found


async def _lease(cluster: Cluster, name: str) -> JSON | None:
    return await cluster.kube.get_or_none(LEASES, cluster.ns, name)


async def _holders(cluster: Cluster, name: str, since: str, holder: str) -> list[tuple[str, int]]:
    """The Lease's (holderIdentity, leaseDurationSeconds) at each change after `since` once `holder` lets it go,
    until someone else holds it."""
    seen: list[tuple[str, int]] = []
    async for event in cluster.kube.watch(LEASES, cluster.ns, resource_version=since):
        spec = event["object"].get("spec") or {}
        if event["type"] != "MODIFIED" or event["object"]["metadata"]["name"] != name:
            continue
        now = (str(spec.get("holderIdentity") or ""), int(spec.get("leaseDurationSeconds") or 0))
        if now[0] != holder and (not seen or seen[-1] != now):
            seen.append(now)
        if seen and seen[-1][0]:
            return seen
    return seen


async def _serving_pods(cluster: Cluster) -> set[str]:
    """The operator pods the status Service selects."""
    return {name for name, pod in (await cluster.pods()).items()
            if name.startswith("op-")
            and (pod["metadata"].get("labels") or {}).get(STATUS_ENDPOINT_LABEL) == STATUS_ENDPOINT_SERVING}


async def test_one_leader_reconciles_and_a_killed_leader_is_replaced(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    election = ["--leader-elect", f"--leader-elect-namespace={cluster.ns}", "--leader-elect-id=mpiop-test",
                "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=4s",
                "--leader-elect-retry-period=500ms"]
    kubeconfig = str(control_plane.kubeconfig)
    for pod in ("op-a", "op-b"):
        await cluster.kube.create(PODS, cluster.ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "labels": {STATUS_ENDPOINT_LABEL: STATUS_ENDPOINT_SERVING}},
            "spec": {"containers": [{"name": "mpiop", "image": "mpiop"}]}})

    def in_pod(manager: str, pod: str) -> OperatorProcess:
        return OperatorProcess.in_namespace(kubeconfig, cluster.ns, manager, tmp_path, *election,
                                            env={"POD_NAME": pod, "POD_NAMESPACE": cluster.ns})

    operators = [in_pod("mpiop-a", "op-a"), in_pod("mpiop-b", "op-b")]
    pods = {"mpiop-a": "op-a", "mpiop-b": "op-b"}

    async def serving_is(expected: set[str]) -> bool:
        return await _serving_pods(cluster) == expected

    try:
        async def one_leader() -> OperatorProcess | None:
            leading = [op for op in operators if await op.is_leader()]
            return leading[0] if len(leading) == 1 else None

        leader = await eventually(one_leader, timeout=60, what="exactly one leader")
        standby = next(op for op in operators if op is not leader)
        for op in operators:
            await eventually(op.ready, timeout=30, what=f"{op.field_manager} ready (leading or standing by)")
        # Both pods started labelled (as after a container restart): the standby cleared its own.
        await eventually(lambda: serving_is({pods[leader.field_manager]}),
                         what="only the leader's pod labelled for the status Service")
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["holderIdentity"]

        await cluster.create_job(mpijob("first", workers=1))
        await drive_to_success(cluster, "first")
        quiet = await standby.metrics()
        assert await standby.is_leader() is False
        assert quiet.value("mpiop_reconcile_duration_seconds_count") == 0, "the standby reconciled"
        assert quiet.by_verb()["PATCH pods"] == 1, "the standby cleared its own pod's label, once"
        # Its writes: its own pod's label, and the status CA's Secret if it started first (whoever does makes it,
        # on the unguarded client: serving/status_ca).
        made_ca = quiet.by_verb()["POST secrets"]
        assert made_ca <= 1 and quiet.writes() == 1 + made_ca, "the standby wrote to the apiserver"
        assert (await leader.metrics()).value("mpiop_reconcile_duration_seconds_count") > 0

        killed = time.monotonic()
        leader.kill()
        await eventually(standby.is_leader, timeout=20, what="the standby to take over within 20 s")
        handover = time.monotonic() - killed
        print(f"\nleader handover after SIGKILL: {handover:.2f}s (lease 5s, renew deadline 4s, retry 0.5s)")
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["leaseTransitions"] >= 1
        await eventually(lambda: serving_is({pods[leader.field_manager], pods[standby.field_manager]}),
                         what="the new leader's pod labelled too")
        # The killed process's container restarts in its pod, as a standby: the pod's stale label goes.
        operators.append(in_pod("mpiop-c", pods[leader.field_manager]))
        replacement = operators[-1]
        await eventually(lambda: serving_is({pods[standby.field_manager]}),
                         what="the restarted standby's pod no longer labelled")

        await cluster.create_job(mpijob("second", workers=1))
        await drive_to_success(cluster, "second")
        # One CA across the handover (the Secret): the new leader's job carries the CA the old leader's has.
        first, second = [(await cluster.kube.get(CONFIGMAPS, cluster.ns, f"{job}-config"))["data"][CA_KEY]
                         for job in ("first", "second")]
        assert first == second, "the new leader serves under another CA"

        writers = await _writers(cluster, {"mpiop-a", "mpiop-b"})
        assert not {name: who for name, who in writers.items() if len(who) > 1}, "objects written by both"
        for name, who in writers.items():
            job = "first" if "/first" in name else "second" if "/second" in name else None
            if job is not None and who:
                expected = leader if job == "first" else standby
                assert who == {expected.field_manager}, f"{name} written by {who}"
        assert {m for who in writers.values() for m in who} == {"mpiop-a", "mpiop-b"}

        # SIGTERM: finish, give the lease up (no holder), exit 0; the standby takes it on its next retry
        # instead of waiting out the 5 s lease.
        await eventually(replacement.ready, timeout=30, what="the restarted process standing by")
        assert not await replacement.is_leader()
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None
        holder = lease["spec"]["holderIdentity"]
        holders = asyncio.create_task(_holders(cluster, "mpiop-test", lease["metadata"]["resourceVersion"],
                                                holder))
        stopped = time.monotonic()
        assert standby.stop() == 0
        assert any("released the lease" in line for line in standby.log_lines()), standby.log_lines()[-10:]
        await eventually(replacement.is_leader, timeout=10, what="the released lease taken over")
        print(f"handover after SIGTERM (lease released): {time.monotonic() - stopped:.2f}s")
        await eventually(lambda: serving_is({pods[leader.field_manager]}),
                         what="the new leader's pod labelled, the stopped leader's label cleared as it stopped")
        print(f"pods the status Service selects: {sorted(await _serving_pods(cluster))}")
        # Released, not waited out: the lease went from the stopped leader to nobody (for 1 s), then was taken.
        seen = await asyncio.wait_for(holders, 30)
        assert seen[0] == ("", 1) and seen[-1][0], seen
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["leaseTransitions"] >= 2
    except BaseException:
        for op in operators:  # shown by pytest with the failure
            print(f"--- {op.field_manager} (exit {op.process and op.process.poll()})", *op.log_lines()[-25:], sep="\n")
        raise
    finally:
        for op in operators:
            op.kill()

