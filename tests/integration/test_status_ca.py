"""The status endpoint's CA kept in a Secret (serving/status_ca), against the real apiserver: made once by whoever
starts first, read by the rest (replicas racing to make it end with one CA), replaced when unreadable or near its
end; a process refused the Secret serves under a CA of its own and says what to grant; and `mpiop run` restarted
with every job's ConfigMap already carrying the CA writes none of them again."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from pathlib import Path

import structlog

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.certs import CA_DAYS
from mpiop.desired.status_report import CA_KEY
from mpiop.kube.client import CONFIGMAPS, SECRETS, KubeClient
from mpiop.serving.status_ca import CERT_KEY, RENEW_BEFORE, SecretRef, certificates, shared_ca
from testkit.operator import Cluster, eventually, mpijob
from testkit.process import OperatorProcess
from testkit.rbac import service_account_kubeconfig

NOW = dt.datetime.now(dt.UTC)


async def test_made_once_then_read_by_every_process(cluster: Cluster) -> None:
    ref = SecretRef(cluster.ns, "mpiop-status-ca")
    first, made = await shared_ca(cluster.kube, ref, NOW)
    again, read = await shared_ca(cluster.kube, ref, NOW + dt.timedelta(hours=1))
    assert (made, read) == ("created", "loaded")
    assert again.cert == first.cert
    stored = await cluster.kube.get(SECRETS, cluster.ns, ref.name)
    assert stored["type"] == "kubernetes.io/tls"
    assert base64.b64decode(stored["data"][CERT_KEY]).decode() == first.cert_pem


async def test_replicas_starting_together_end_with_one_ca(cluster: Cluster) -> None:
    ref = SecretRef(cluster.ns, "raced")
    results = await asyncio.gather(*(shared_ca(cluster.kube, ref, NOW) for _ in range(4)))
    assert len({ca.cert_pem for ca, _ in results}) == 1, results
    assert sorted(outcome for _, outcome in results) == ["created", "loaded", "loaded", "loaded"]


async def test_an_unreadable_or_ending_ca_is_replaced(cluster: Cluster) -> None:
    ref = SecretRef(cluster.ns, "mended")
    await cluster.kube.create(SECRETS, cluster.ns, {"metadata": {"name": ref.name}, "type": "Opaque",
                                                     "data": {CERT_KEY: base64.b64encode(b"garbage").decode()}})
    with structlog.testing.capture_logs() as logged:
        mended, outcome = await shared_ca(cluster.kube, ref, NOW)
    assert outcome == "renewed"
    warning = next(e for e in logged if e["log_level"] == "warning")
    assert warning["secret"] == f"{cluster.ns}/mended" and "no data['tls.key']" in warning["error"], warning
    # Within RENEW_BEFORE of its end: replaced by a new one, which replicas then read (two at once: one writes).
    late = NOW + dt.timedelta(days=CA_DAYS) - RENEW_BEFORE + dt.timedelta(days=1)
    results = await asyncio.gather(*(shared_ca(cluster.kube, ref, late) for _ in range(2)))
    assert sorted(outcome for _, outcome in results) == ["loaded", "renewed"], results
    renewed = results[0][0]
    assert renewed.cert == results[1][0].cert != mended.cert
    assert abs(renewed.valid_for(late) - dt.timedelta(days=CA_DAYS)) < dt.timedelta(seconds=1)  # whole seconds


async def test_a_restarted_process_serves_under_the_same_ca_and_rewrites_no_configmap(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """Before the CA was shared, each process made its own, so a restart (or a leader handover) PATCHed every job's
    ConfigMap with it: 1,000 writes at 1,000 jobs (bench, scale phase)."""
    secret = f"{cluster.ns}/mpiop-status-ca"

    def operator() -> OperatorProcess:
        return OperatorProcess(control_plane.kubeconfig, tmp_path / "mpiop.log",
                               [f"--namespace={cluster.ns}", f"--status-ca-secret={secret}"])

    first = operator()
    first.start()
    try:
        await first.wait_synced()
        await cluster.create_job(mpijob("ca", workers=1))

        async def config_map_with_ca() -> JSON | None:
            found = await cluster.kube.get_or_none(CONFIGMAPS, cluster.ns, "ca-config")
            return found if found and CA_KEY in (found.get("data") or {}) else None

        written = await eventually(config_map_with_ca, what="the job's ConfigMap with the CA")
        await first.settle()
        assert any(e.get("event") == "status endpoint CA created" for e in first.json_log())
    finally:
        first.stop()
    stored = await cluster.kube.get(SECRETS, cluster.ns, "mpiop-status-ca")
    assert written["data"][CA_KEY] == base64.b64decode(stored["data"][CERT_KEY]).decode()

    second = operator()
    second.start()
    try:
        await second.wait_synced()
        settled = await second.settle(min_reconciles=1)
        assert any(e.get("event") == "status endpoint CA loaded" for e in second.json_log())
        assert settled.writes() == 0, settled.by_verb()
    finally:
        second.stop()
    after = await cluster.kube.get(CONFIGMAPS, cluster.ns, "ca-config")
    assert after["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


async def test_a_process_refused_the_secret_serves_under_its_own_ca_and_says_what_to_grant(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """An image upgraded before its RBAC: the endpoint still serves (as before the Secret), and the log says why
    a restart will rewrite every job's ConfigMap and what the ServiceAccount lacks."""
    await eventually(lambda: cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/serviceaccounts/default"),
                     what="the namespace's default ServiceAccount")
    kubeconfig = await service_account_kubeconfig(control_plane, cluster.kube, tmp_path / "kubeconfig",
                                                  cluster.ns, "default")  # no role at all
    client = await KubeClient.connect(kubeconfig)
    try:
        with structlog.testing.capture_logs() as logged:
            served = await certificates(client, ["127.0.0.1"], SecretRef(cluster.ns, "mpiop-status-ca"), NOW)
    finally:
        await client.close()
    assert served.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    error = next(e for e in logged if e["log_level"] == "error")
    assert "secrets create, and get and update on the Secret" in error["event"] and "403" in error["error"], error
    assert await cluster.kube.get_or_none(SECRETS, cluster.ns, "mpiop-status-ca") is None
