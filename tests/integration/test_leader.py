"""Two `mpiop run --leader-elect` processes against the real apiserver: one reconciles, a killed leader is
replaced within 20 s, no object is ever written by both, and SIGTERM releases the lease.

`OperatorProcess` (mpiop run as a child process, its /metrics and probes) is shared with test_metrics.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from devcluster.controlplane import ControlPlane, free_port
from mpiop.kube.client import CONFIGMAPS, EVENTS, MPIJOBS, PODS, SECRETS, SERVICES
from mpiop.leader import LEASES
from tests.integration.operator import Cluster, eventually, mpijob

JSON = dict[str, Any]
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _die_with_parent() -> None:
    """Children get SIGKILL if the test process dies, so an interrupted run leaks no operator."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class OperatorProcess:
    """`mpiop run` as a child process, with its own /metrics and probe ports and field manager."""

    field_manager: str
    log_path: Path
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, kubeconfig: str, namespace: str, field_manager: str, logs: Path, *extra: str) -> OperatorProcess:
        op = cls(field_manager, logs / f"{field_manager}.log")
        argv = [sys.executable, "-m", "mpiop", "run", f"--kubeconfig={kubeconfig}", f"--namespace={namespace}",
                "--log-format=json", "--workers=4", f"--field-manager={field_manager}",
                f"--metrics-addr=127.0.0.1:{op.metrics_port}", f"--health-addr=127.0.0.1:{op.health_port}", *extra]
        with op.log_path.open("wb") as log:
            op.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return op

    def log_lines(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    async def http(self, port: int, path: str) -> tuple[int, str]:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
                    session.get(f"http://127.0.0.1:{port}{path}") as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return 0, ""

    async def metrics(self) -> Metrics:
        status, text = await self.http(self.metrics_port, "/metrics")
        assert status == 200, f"/metrics of {self.field_manager} answered {status}"
        return Metrics(text)

    async def ready(self) -> bool:
        return (await self.http(self.health_port, "/readyz"))[0] == 200

    async def is_leader(self) -> bool:
        status, text = await self.http(self.metrics_port, "/metrics")
        return status == 200 and Metrics(text).value("mpi_operator_is_leader") == 1

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, and the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class Metrics:
    """One scrape: sums of samples by name and label subset."""

    def __init__(self, text: str) -> None:
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def writes(self, *, except_resource: str = "leases") -> float:
        return sum(s.value for s in self.samples if s.name == "mpiop_api_requests_total"
                   and s.labels["verb"] in WRITES and s.labels["resource"] != except_resource)


async def drive_to_success(cluster: Cluster, name: str, launcher: str = "", workers: int = 1) -> None:
    """Play the kubelet through a job's life until it is Succeeded and its running workers deleted
    (`launcher`: the attempt's launcher, `<name>-launcher` in the first one)."""
    launcher = launcher or f"{name}-launcher"
    wanted = {launcher, *(f"{name}-worker-{i}" for i in range(workers))}

    async def pods_exist() -> bool:
        return wanted <= set(await cluster.pods())

    async def only_launcher_left() -> bool:
        return not any(p.startswith(f"{name}-worker-") for p in await cluster.pods())

    await eventually(pods_exist, what=f"pods of {name}")
    await cluster.run_all([*sorted(wanted - {launcher}), launcher])
    await eventually(lambda: cluster.condition(name, "Running"), what=f"{name} Running")
    await cluster.set_phase(launcher, "Succeeded")
    await eventually(lambda: cluster.condition(name, "Succeeded"), what=f"{name} Succeeded")
    await eventually(only_launcher_left, what=f"{name}'s running workers deleted")


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


async def test_one_leader_reconciles_and_a_killed_leader_is_replaced(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    election = ["--leader-elect", f"--leader-elect-namespace={cluster.ns}", "--leader-elect-id=mpiop-test",
                "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=4s",
                "--leader-elect-retry-period=500ms"]
    kubeconfig = str(control_plane.kubeconfig)
    operators = [OperatorProcess.start(kubeconfig, cluster.ns, manager, tmp_path, *election)
                 for manager in ("mpiop-a", "mpiop-b")]
    try:
        async def one_leader() -> OperatorProcess | None:
            leading = [op for op in operators if await op.is_leader()]
            return leading[0] if len(leading) == 1 else None

        leader = await eventually(one_leader, timeout=60, what="exactly one leader")
        standby = next(op for op in operators if op is not leader)
        for op in operators:
            await eventually(op.ready, timeout=30, what=f"{op.field_manager} ready (leading or standing by)")
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["holderIdentity"]

        await cluster.create_job(mpijob("first", workers=1))
        await drive_to_success(cluster, "first")
        quiet = await standby.metrics()
        assert await standby.is_leader() is False
        assert quiet.value("mpiop_reconcile_duration_seconds_count") == 0, "the standby reconciled"
        assert quiet.writes() == 0, "the standby wrote to the apiserver"
        assert (await leader.metrics()).value("mpiop_reconcile_duration_seconds_count") > 0

        killed = time.monotonic()
        leader.kill()
        await eventually(standby.is_leader, timeout=20, what="the standby to take over within 20 s")
        handover = time.monotonic() - killed
        print(f"\nleader handover after SIGKILL: {handover:.2f}s (lease 5s, renew deadline 4s, retry 0.5s)")
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["leaseTransitions"] >= 1
        # The killed pod comes back (as its Deployment would restart it), as a standby.
        operators.append(OperatorProcess.start(kubeconfig, cluster.ns, "mpiop-c", tmp_path, *election))
        replacement = operators[-1]

        await cluster.create_job(mpijob("second", workers=1))
        await drive_to_success(cluster, "second")

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
        stopped = time.monotonic()
        assert standby.stop() == 0
        assert any("released the lease" in line for line in standby.log_lines()), standby.log_lines()[-10:]
        await eventually(replacement.is_leader, timeout=10, what="the released lease taken over")
        released = time.monotonic() - stopped
        print(f"handover after SIGTERM (lease released): {released:.2f}s")
        assert released < 3.5
        lease = await _lease(cluster, "mpiop-test")
        assert lease is not None and lease["spec"]["leaseTransitions"] >= 2
    except BaseException:
        for op in operators:  # shown by pytest with the failure
            print(f"--- {op.field_manager} (exit {op.process and op.process.poll()})", *op.log_lines()[-25:], sep="\n")
        raise
    finally:
        for op in operators:
            op.kill()

