"""A real Prometheus server (Debian's, hack/prometheus.sh) scrapes a running mpiop every second and evaluates
the alert rules deploy/ ships (the PrometheusRule the overlay and the chart render) every second.

The rules are loaded as shipped except `for:`, which the test shortens to FOR (5m, 10m or 15m would not fit
in a test); the expressions and their windows ([1h], [15m], [5m]) are untouched. One healthy run first: a job
that restarts once and succeeds; no alert fires meanwhile, and every query of the dashboard returns a series.
Then each alert is driven to firing by the condition it names, one after the other, and no other alert starts
firing with it: jobs that fail, a restart storm, reconciles that fail (a pod admission webhook that is down),
a work queue that grows (a webhook that hangs: every pod creation waits out its timeout), and no leader (the
leader stops; the standby finds the Lease held elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from devcluster.controlplane import ControlPlane, free_port
from mpiop.kube.client import CONFIGMAPS, KubeClient, Resource
from mpiop.leader import LEASES
from testkit.operator import Cluster, drive_to_success, eventually, mpijob, start_pods
from testkit.pods import env_of
from testkit.process import OperatorProcess
from testkit.prometheus import PrometheusServer, Series, dashboard_queries, finite, rules_with_for
from testkit.rbac import pod_token

FOR = "3s"
POLL = 0.25
QUIET_AFTER_HEALTHY = 6.0  # evaluations this long after it (past FOR and a few more) fire what was pending
WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                    "ValidatingWebhookConfiguration", namespaced=False)
QUEUED_JOBS = 120  # MPIOperatorWorkQueueGrowing: more than 100 waiting


class AlertWatch:
    """Polls /api/v1/alerts in the background: when each alert was first seen firing."""

    def __init__(self, prometheus: PrometheusServer) -> None:
        self.prometheus = prometheus
        self.firing_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            now = time.monotonic()
            for name, state in (await self.prometheus.alerts()).items():
                if state == "firing":
                    self.firing_at.setdefault(name, now)
            await asyncio.sleep(POLL)  # poll interval: when each alert fired, to within POLL s

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[AlertWatch]:
        self._task = asyncio.create_task(self._poll())
        try:
            yield self
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def fired(self, alert: str, since: float, timeout: float = 60.0) -> float:
        """Seconds from `since` until `alert` fired; fails if any other alert started firing meanwhile."""
        before = {name for name, at in self.firing_at.items() if at < since}

        async def firing() -> bool:
            assert self._task is not None and not self._task.done(), "the alert poller died"
            return alert in self.firing_at

        await eventually(firing, timeout=timeout, what=f"{alert} firing")
        others = set(self.firing_at) - before - {alert}
        assert not others, f"driving {alert} also fired {others}"
        return self.firing_at[alert] - since


async def _scraped(prometheus: PrometheusServer, op: OperatorProcess, expr: str) -> list[Series]:
    return await prometheus.query(f'{expr}{{instance="127.0.0.1:{op.metrics_port}"}}')


async def _pods_of(cluster: Cluster, *names: str) -> None:
    async def there() -> bool:
        return set(names) <= set(await cluster.pods())
    await eventually(there, what=f"pods {names}")


async def _restart(cluster: Cluster, job: str, attempt: int) -> None:
    """Attempt `attempt` of `job` (1 worker) loses its worker to the OOM killer: a whole-job restart."""
    launcher = f"{job}-launcher" + (f"-{attempt}" if attempt else "")
    await _pods_of(cluster, launcher, f"{job}-worker-0")
    await cluster.set_phase(f"{job}-worker-0", "Failed", exit_code=137, reason="OOMKilled")

    async def next_attempt() -> bool:
        return f"{job}-launcher-{attempt + 1}" in await cluster.pods()
    await eventually(next_attempt, what=f"{job}'s attempt {attempt + 1}")


def _webhook(name: str, namespace: str, port: int, *, failure_policy: str, timeout: int) -> dict[str, Any]:
    """An admission webhook on pod creation in `namespace` only, served (or not) at 127.0.0.1:`port`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "pods.mpiop-prometheus-test.example.com",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/validate"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": failure_policy, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout,
        }],
    }


@contextlib.asynccontextmanager
async def _admission_webhook(kube: KubeClient, manifest: dict[str, Any]) -> AsyncIterator[None]:
    await kube.create(WEBHOOKS, None, manifest)
    try:
        yield
    finally:
        await kube.delete(WEBHOOKS, None, manifest["metadata"]["name"])


async def _report_progress(cluster: Cluster, job: str, pod_name: str, tmp_path: Path) -> None:
    """`pod_name` reports half its job done as a training program does: mpiop's stdlib client, with the URL of
    the pod's environment, a token bound to the pod (what its projected volume holds) and the job's CA."""
    pod = await cluster.pod(pod_name)
    assert pod is not None
    env = env_of(pod)
    token, ca = tmp_path / f"{pod_name}.token", tmp_path / f"{job}-ca.crt"
    token.write_text(await pod_token(cluster.kube, cluster.ns, pod))
    ca.write_text((await cluster.kube.get(CONFIGMAPS, cluster.ns, f"{job}-config"))["data"]["mpiop-status-ca.crt"])
    program = "from mpiop.progress_client import post_status; print(post_status(50, 60, {'loss': 0.25}))"
    posted = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "MPIOP_STATUS_URL": env["MPIOP_STATUS_URL"], "MPIOP_STATUS_TOKEN": str(token),
             "MPIOP_STATUS_CA": str(ca)})
    assert posted.stdout.strip() == "202", (posted.stdout, posted.stderr)

    async def written() -> object:
        return ((await cluster.job(job) or {}).get("status") or {}).get("trainerStatus")
    await eventually(written, what=f"{job}'s progress in its status")


async def _healthy_run(cluster: Cluster, tmp_path: Path) -> None:
    """One job restarts once (its worker OOM-killed), reports its progress, then succeeds."""
    await cluster.create_job(mpijob("ok", workers=1, run_policy={"backoffLimit": 3}))
    await start_pods(cluster, "ok", 1, running=False)
    await _restart(cluster, "ok", 0)
    await _pods_of(cluster, "ok-launcher-1", "ok-worker-0")
    await _report_progress(cluster, "ok", "ok-worker-0", tmp_path)
    await drive_to_success(cluster, "ok", launcher="ok-launcher-1")


async def _dashboard_series(server: PrometheusServer) -> dict[str, int]:
    """"title: query" -> how many series with a value it returns, once all answer (or after 15 s)."""
    counts: dict[str, int] = {}

    async def all_answer() -> bool:
        for title, expr in dashboard_queries():
            counts[f"{title}: {expr}"] = len(finite(await server.query(expr)))
        return all(counts.values())
    with contextlib.suppress(AssertionError):
        await eventually(all_answer, timeout=15, what="every dashboard query answering")
    return counts


@contextlib.asynccontextmanager
async def _jobs_fail(cluster: Cluster, kube: KubeClient) -> AsyncIterator[None]:
    """3 launchers exit 1 under backoffLimit 0 (after the healthy run's 1 success)."""
    for i in range(3):
        await cluster.create_job(mpijob(f"fail-{i}", workers=1, run_policy={"backoffLimit": 0}))
    for i in range(3):
        await _pods_of(cluster, f"fail-{i}-launcher")
        await cluster.set_phase(f"fail-{i}-launcher", "Failed", exit_code=1)
    yield


@contextlib.asynccontextmanager
async def _restart_storm(cluster: Cluster, kube: KubeClient) -> AsyncIterator[None]:
    """One job's worker OOM-killed 12 times in a row."""
    await cluster.create_job(mpijob("storm", workers=1, run_policy={"backoffLimit": 50}))
    for attempt in range(12):
        await _restart(cluster, "storm", attempt)
    yield


@contextlib.asynccontextmanager
async def _webhook_down(cluster: Cluster, kube: KubeClient) -> AsyncIterator[None]:
    """A pod admission webhook that is down (failurePolicy Fail): every pod creation answers 500, so 5 new
    jobs' reconciles fail and are retried with backoff."""
    down = _webhook(f"down-{cluster.ns}", cluster.ns, free_port(), failure_policy="Fail", timeout=2)
    async with _admission_webhook(kube, down):
        for i in range(5):
            await cluster.create_job(mpijob(f"err-{i}", workers=1))
        yield


@contextlib.asynccontextmanager
async def _webhook_hangs(cluster: Cluster, kube: KubeClient) -> AsyncIterator[None]:
    """A webhook that never answers (failurePolicy Ignore, 5 s timeout) holds each pod creation 5 s, so the
    operator's 4 workers fall behind 120 new jobs."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # accepts nothing: a TLS handshake waits for the webhook's timeout
        hangs = _webhook(f"hangs-{cluster.ns}", cluster.ns, silent.getsockname()[1], failure_policy="Ignore",
                         timeout=5)
        async with _admission_webhook(kube, hangs):
            for i in range(QUEUED_JOBS):
                await cluster.create_job(mpijob(f"q-{i}", workers=1))
            yield


CONDITIONS: dict[str, Callable[[Cluster, KubeClient], contextlib.AbstractAsyncContextManager[None]]] = {
    "MPIJobsFailing": _jobs_fail,
    "MPIJobRestartStorm": _restart_storm,
    "MPIOperatorReconcileErrors": _webhook_down,
    "MPIOperatorWorkQueueGrowing": _webhook_hangs,
}


async def test_a_real_prometheus_scrapes_mpiop_and_fires_each_shipped_alert(
        control_plane: ControlPlane, kube: KubeClient, cluster: Cluster, prometheus: str, tmp_path: Path,
        prometheus_report: list[str]) -> None:
    def report(line: str) -> None:
        print(line)
        prometheus_report.append(line)

    election = [f"--namespace={cluster.ns}", "--workers=4", "--leader-elect", f"--leader-elect-namespace={cluster.ns}",
                "--status-write-seconds=1"]
    leader = OperatorProcess(control_plane.kubeconfig, tmp_path / "leader.log", election)
    standby = OperatorProcess(control_plane.kubeconfig, tmp_path / "standby.log", election)
    rules, shipped_for = rules_with_for(FOR)
    server = PrometheusServer(prometheus, tmp_path, [f"127.0.0.1:{op.metrics_port}" for op in (leader, standby)],
                              rules)
    report(f"{server.version()}; scrape and evaluation every 1s; for: shortened to {FOR}")
    try:
        leader.start()
        await eventually(leader.is_leader, timeout=60, what="the leader leading")
        server.start()
        await server.wait_ready()

        async def leader_scraped() -> bool:
            return [s.value for s in await _scraped(server, leader, "mpi_operator_is_leader")] == [1.0]
        await eventually(leader_scraped, what="the leader scraped")
        # Until its first scrape (its scrape manager applies new targets every 5 s) Prometheus sees no replica
        # at all, so MPIOperatorNotLeading is pending, and fires under a 3 s `for:`: start once it has resolved.

        async def no_alert_active() -> bool:
            return not await server.alerts()
        await eventually(no_alert_active, what="no alert active once the leader is scraped")

        async with AlertWatch(server).running() as watch:
            # A healthy run: no alert fires, and every dashboard query returns a series with a value.
            healthy = time.monotonic()
            await _healthy_run(cluster, tmp_path)
            ended = time.time()
            await eventually(lambda: server.evaluated_after(ended + QUIET_AFTER_HEALTHY), timeout=60,
                             what=f"every rule evaluated {QUIET_AFTER_HEALTHY} s after the healthy run")
            quiet = time.monotonic() - healthy
            active = await server.alerts()
            assert not watch.firing_at and "firing" not in active.values(), (
                f"alerts fired on a healthy run: {watch.firing_at}, now {active}")
            for name, rule in (await server.rules()).items():
                assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
            counts = await _dashboard_series(server)
            report(f"dashboard queries after a healthy run ({len(counts)}; series with a value):")
            for query, count in counts.items():
                report(f"  {count:3d}  {query}")
            assert all(counts.values()), [q for q, n in counts.items() if not n]

            # Each alert from the condition it names, one after the other.
            fired: dict[str, float] = {}
            for alert, condition in CONDITIONS.items():
                since = time.monotonic()
                async with condition(cluster, kube):
                    fired[alert] = await watch.fired(alert, since)

            # No leader: the leader stops, and the standby that starts finds the Lease held by another holder.
            assert leader.stop() == 0
            since = time.monotonic()
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            await kube.patch(LEASES, cluster.ns, "mpiop", {"spec": {
                "holderIdentity": "elsewhere", "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}})
            standby.start()
            fired["MPIOperatorNotLeading"] = await watch.fired("MPIOperatorNotLeading", since)

            async def standby_scraped() -> bool:
                return [s.value for s in await _scraped(server, standby, "mpi_operator_is_leader")] == [0.0]
            await eventually(standby_scraped, what="the standby scraped, not leading")
            scraped = time.time()
            await eventually(lambda: server.evaluated_after(scraped + 2), timeout=30,
                             what="two evaluations with the standby's 0 in the query")
            assert (await server.alerts()).get("MPIOperatorNotLeading") == "firing"

        report(f"alerts: none fired in the healthy run's {quiet:.1f} s (a job restarted once, then succeeded; every "
               f"rule evaluated, health ok); seconds from driving each one's condition to firing (for: as shipped, "
               f"{FOR} here):")
        for alert, seconds in fired.items():
            report(f"  {alert:28s} for {shipped_for[alert]:>3s}  quiet {quiet:.1f} s  fired after {seconds:4.1f} s")
        assert set(fired) == set(shipped_for)
    except BaseException:
        for op in (leader, standby):
            if op.process is not None:
                print(f"--- {op.log_path.name}", *op.log_lines()[-15:], sep="\n")
        print("--- prometheus", server.log_tail(), sep="\n")
        with contextlib.suppress(Exception):
            for expr in ("up", "mpi_operator_is_leader", 'ALERTS{alertstate="firing"}'):
                print(*await server.history(expr), sep="\n")
        raise
    finally:
        server.stop()
        for op in (leader, standby):
            op.kill()

