"""The GPU layout webhook with --gpu-layout-client-ca, called by a real apiserver that presents a client certificate
(its AdmissionConfiguration's kubeConfigFile, as docs/api.md tells an admin to write it): the job is stored laid
out, while a caller without that certificate (any pod) gets a 403 and one with another CA's no TLS session.

Its own control plane (an apiserver started with --admission-control-config-file, opt-in), since the session's
runs with the production defaults."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from devcluster.certs import CertificateAuthority, KeyPair
from devcluster.controlplane import ControlPlane, free_port
from devcluster.install import install_crd
from mpiop.certs import Certificates
from mpiop.kube.client import MPIJOBS, NAMESPACES, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.server import Servers, trust_clients
from mpiop.serving import layout_webhook
from testkit.hostile_layout import admission_review
from testkit.layout_webhook import configuration
from testkit.mpijobs import make_mpijob
from testkit.nodes import gpu_nodes
from testkit.operator import eventually

NAMESPACE = "client-ca"


def admission_configuration(directory: Path, webhook_host: str, client: KeyPair) -> Path:
    """The apiserver's --admission-control-config-file: the mutating webhooks' kubeConfigFile names, for the webhook's
    host (host:port of a URL webhook; for the chart's, the Service's DNS name, mpiop-status.<namespace>.svc:8443),
    the client certificate to present."""
    kubeconfig = directory / "webhook-kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [
        {"name": webhook_host, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}]}))
    path = directory / "admission.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
                                    "plugins": [{"name": "MutatingAdmissionWebhook", "configuration": {
                                        "apiVersion": "apiserver.config.k8s.io/v1",
                                        "kind": "WebhookAdmissionConfiguration",
                                        "kubeConfigFile": str(kubeconfig)}}]}))
    return path


@pytest.fixture
async def apiserver_with_a_client_cert(tmp_path: Path) -> AsyncIterator[tuple[KubeClient, int, CertificateAuthority]]:
    """A control plane whose apiserver presents a client certificate of a CA of its own to the webhook on `port`."""
    clients = CertificateAuthority(tmp_path / "webhook-clients")
    port = free_port()
    client = clients.issue("apiserver", common_name="kube-apiserver-webhook-client")
    flags = [f"--admission-control-config-file={admission_configuration(tmp_path, f'127.0.0.1:{port}', client)}"]
    with ControlPlane(workdir=tmp_path / "plane", controller_manager=False, extra_apiserver_flags=flags) as plane:
        kube = await KubeClient.connect(str(plane.kubeconfig))
        try:
            await install_crd(kube)
            await kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": NAMESPACE}})
            yield kube, port, clients
        finally:
            await kube.close()


async def test_with_a_client_ca_the_apiserver_is_answered_and_no_one_else(
        apiserver_with_a_client_cert: tuple[KubeClient, int, CertificateAuthority], tmp_path: Path) -> None:
    kube, port, clients = apiserver_with_a_client_cert
    certificates = Certificates(["127.0.0.1"])
    trust_clients(certificates.context, str(clients.pair.cert))
    app = web.Application()
    layout_webhook.add_route(app, lambda: gpu_nodes("n", 10, 8), 1000, verified_clients_only=True)
    servers = Servers()
    await servers.start(app, f"127.0.0.1:{port}", "the GPU layout webhook", ssl_context=certificates.context)
    name = "client-ca-gpu-layout"
    try:
        await kube.create(layout_webhook.CONFIGURATIONS, None,
                          configuration(name, f"https://127.0.0.1:{port}", NAMESPACE))
        assert await layout_webhook.install_ca_bundle(kube, name, certificates.ca_pem)
        job = make_mpijob("big", NAMESPACE).total_gpus(64).manifest()

        async def laid_out() -> str | None:  # in effect a moment after it is made (the apiserver watches them)
            answer = await kube.request("POST", MPIJOBS.path(NAMESPACE), body=job, query={"dryRun": "All"})
            return (answer["metadata"].get("annotations") or {}).get(GPU_LAYOUT_ANNOTATION)

        record = await eventually(laid_out, timeout=60, what="the job laid out through the webhook")
        print(f"\nthe apiserver, with its client certificate: {record}")
        assert record.startswith("64 nvidia.com/gpu as 8 workers x 8 GPUs") and record.endswith("at admission")

        review = json.dumps(admission_review(job))
        pod = ssl.create_default_context(cadata=certificates.ca_pem)  # what a pod has: the CA, no client certificate
        stranger = ssl.create_default_context(cadata=certificates.ca_pem)
        other = CertificateAuthority(tmp_path / "strangers").issue("s", common_name="kube-apiserver-webhook-client")
        stranger.load_cert_chain(other.cert, other.key)
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{port}{layout_webhook.PATH}", data=review, ssl=pod) as answer:
                said = await answer.json()
                print(f"a pod: {answer.status} {said['message']}")
                assert (answer.status, said["reason"]) == (403, "unauthenticated")
            with pytest.raises(aiohttp.ClientError):
                async with session.post(f"https://127.0.0.1:{port}{layout_webhook.PATH}", data=review, ssl=stranger):
                    pass
    finally:
        await kube.delete(layout_webhook.CONFIGURATIONS, None, name)
        await servers.stop()
