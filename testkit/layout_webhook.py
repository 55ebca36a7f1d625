"""mpiop's GPU layout webhook for a test, as the leader serves it: HTTPS under a CA of its own (mpiop.certs), the
route of serving/layout_webhook on the in-process operator's node cache, registered by deploy/base/webhook.yaml
itself (its clientConfig a URL on loopback instead of the Service, and, the apiserver being shared, for the test's
namespace only), the CA written by mpiop's own install_ca_bundle."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator

import yaml
from aiohttp import web

from devcluster.controlplane import free_port
from mpiop.api.raw import JSON
from mpiop.certs import Certificates
from mpiop.kube.client import MPIJOBS, ApiError, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.server import Servers
from mpiop.serving import layout_webhook
from testkit.deploy import DEPLOY
from testkit.operator import Operator, eventually


def configuration(name: str, url: str, namespace: str) -> JSON:
    """deploy/base/webhook.yaml, calling `url` for jobs of `namespace` only."""
    shipped: JSON = yaml.safe_load((DEPLOY / "base" / "webhook.yaml").read_text())
    ours = copy.deepcopy(shipped)
    ours["metadata"]["name"] = name
    hook = ours["webhooks"][0]
    hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"]}
    hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return ours


@contextlib.asynccontextmanager
async def serving_layout_webhook(operator: Operator, kube: KubeClient, namespace: str,
                                 probe: JSON) -> AsyncIterator[str]:
    """The webhook for the block; yields its configuration's name. It is in effect once a server-side dry run of
    `probe` (a total-GPU job the test's nodes can hold) comes back laid out: the apiserver loads webhook
    configurations from a watch, a moment after they are made."""
    certificates = Certificates(["127.0.0.1"])
    port = free_port()
    app = web.Application()
    layout_webhook.add_route(app, operator.manager.caches.node_list,
                             operator.manager.config.settings.gpu_layout_max_entries, operator.manager.caches.dra)
    servers = Servers()
    await servers.start(app, f"127.0.0.1:{port}", "the GPU layout webhook", ssl_context=certificates.context)
    name = f"{namespace}-gpu-layout"
    await kube.create(layout_webhook.CONFIGURATIONS, None, configuration(name, f"https://127.0.0.1:{port}", namespace))
    try:
        assert await layout_webhook.install_ca_bundle(kube, name, certificates.ca_pem)

        async def in_effect() -> bool:
            answer = await kube.request("POST", MPIJOBS.path(namespace), body=probe, query={"dryRun": "All"})
            return GPU_LAYOUT_ANNOTATION in (answer["metadata"].get("annotations") or {})

        await eventually(in_effect, what=f"the GPU layout webhook {name} in effect")
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(layout_webhook.CONFIGURATIONS, None, name)
        await servers.stop()
