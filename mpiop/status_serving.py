"""The status endpoint as `mpiop run` serves it (the process layer's, apart from the flags): its certificates and
their renewal, its limits, the TokenReviews' own client, and the GPU layout webhook beside it. `namespace` is the
process's own (process.own_namespace), where the CA's Secret is by default.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import ssl

import structlog

from mpiop import metrics
from mpiop.certs import Certificates
from mpiop.controller.manager import Manager
from mpiop.desired.status_report import StatusEndpoint
from mpiop.kube.client import KubeClient
from mpiop.policies import graceful_stop
from mpiop.request_bodies import REFUSAL_CODES
from mpiop.server import Limits, Servers, trust_clients
from mpiop.serving import layout_webhook, status_ca
from mpiop.serving.status_endpoint import OwnPod, StatusWriter, status_app
from mpiop.serving.token_reviews import ReviewLimits, TokenReviews

log = structlog.get_logger(__name__)


@dataclasses.dataclass(frozen=True)
class ServingConfig:
    """What the status endpoint, its TokenReviews and the layout webhook beside it are served with: read once from
    the flags (`from_args`), so no server reads `args` (issue 63's one process layer)."""

    enabled: bool  # --status-endpoint
    url: str  # --status-url
    ca_secret: str  # --status-ca-secret
    status_addr: str  # --status-addr (the name the port inventory, tests/unit/test_security_inventory.py, reads)
    write_seconds: float  # --status-write-seconds
    webhook: str  # --gpu-layout-webhook where --gpu-layout is on, else '' (not served)
    client_ca: str  # --gpu-layout-client-ca where the webhook is served, else ''
    limits: Limits  # --status-max-connections ... --status-body-bytes-in-flight (also the probes' and metrics')
    reviews: ReviewLimits  # --status-review-*, --status-token-cache-size
    webhook_limits: layout_webhook.WebhookLimits  # --gpu-layout-per-source-*
    kubeconfig: str | None
    field_manager: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServingConfig:
        webhook = str(args.gpu_layout_webhook) if args.gpu_layout else ""
        return cls(
            enabled=bool(args.status_endpoint), url=args.status_url, ca_secret=args.status_ca_secret,
            status_addr=args.status_addr, write_seconds=args.status_write_seconds, webhook=webhook,
            client_ca=str(args.gpu_layout_client_ca) if webhook else "",
            limits=Limits(max_connections=args.status_max_connections,
                          max_connections_per_source=args.status_max_connections_per_source,
                          connections_per_source_qps=args.status_connections_per_source_qps,
                          connections_per_source_burst=args.status_connections_per_source_burst,
                          idle_seconds=args.status_idle_seconds, max_headers=args.status_max_headers,
                          max_header_bytes=args.status_max_header_bytes, request_seconds=args.status_request_seconds,
                          body_bytes_in_flight=args.status_body_bytes_in_flight),
            reviews=ReviewLimits(in_flight=args.status_review_in_flight,
                                 per_source_qps=args.status_review_per_source_qps,
                                 per_source_burst=args.status_review_per_source_burst,
                                 cache_size=args.status_token_cache_size, queue=args.status_review_queue),
            webhook_limits=layout_webhook.WebhookLimits(per_source_qps=args.gpu_layout_per_source_qps,
                                                        per_source_burst=args.gpu_layout_per_source_burst),
            kubeconfig=args.kubeconfig, field_manager=args.field_manager)


async def status_certificates(config: ServingConfig, client: KubeClient, namespace: str) -> Certificates | None:
    """The status endpoint's serving certificate, signed by the CA of --status-ca-secret (made there if need be); its
    TLS verifies the clients' certificates against --gpu-layout-client-ca when set."""
    if not config.enabled:
        return None
    try:
        hosts = status_ca.endpoint_hosts(config.url)
        ref = status_ca.parse_secret_ref(config.ca_secret, namespace)
        certificates = await status_ca.certificates(client, hosts, ref, dt.datetime.now(dt.UTC))
    except (ValueError, status_ca.CASecretError) as error:
        raise SystemExit(str(error)) from None
    if config.client_ca:
        try:
            trust_clients(certificates.context, config.client_ca)
        except (OSError, ssl.SSLError) as error:
            raise SystemExit(f"--gpu-layout-client-ca {config.client_ca}: not a readable PEM CA: {error}") from None
    return certificates


def count_refusal(limit: str) -> None:
    """A connection closed at a limit (code 0: no answer was sent), a request past its deadline (408), an encoded
    body (415) or one over the bytes in flight (503), in the posts' counter."""
    metrics.STATUS_POSTS.labels(str(REFUSAL_CODES.get(limit, 0)), limit).inc()


CA_CHECK_SECONDS = 3600.0


def trust(manager: Manager, url: str, ca_pem: str) -> None:
    """Have the jobs' pods trust `ca_pem`: the settings each reconcile decides by, so the next pass of each job (the
    resync, every --resync-seconds) writes it into the job's ConfigMap, whence the kubelet gives it to its pods."""
    settings = dataclasses.replace(manager.reconciler.settings, status_endpoint=StatusEndpoint(url, ca_pem))
    manager.config.settings = manager.reconciler.settings = settings


async def serve_status(servers: Servers, manager: Manager, client: KubeClient, config: ServingConfig,
                       certificates: Certificates, leading: asyncio.Event | None,
                       labelled: tuple[OwnPod, KubeClient] | None, namespace: str) -> None:
    """The status endpoint, once leading (only the leader may write): it serves until the process stops. Hourly,
    its serving certificate is renewed from the same CA when due, and the CA itself before it ends
    (status_ca.Renewal: the jobs' pods are given the next CA beside the current one before it is served). Once it
    listens, the process's pod is labelled for the Service that routes the jobs' posts, and the GPU layout webhook
    (served beside it) is given the CA. TokenReviews go through a client of their own (token_reviews)."""
    if leading is not None:
        await leading.wait()
    ref = status_ca.parse_secret_ref(config.ca_secret, namespace)
    renewal = status_ca.Renewal(certificates, ref)
    review_client = await KubeClient.connect(config.kubeconfig, qps=0, burst=config.reviews.in_flight,
                                             observer=metrics.observe_request, field_manager=config.field_manager)
    reviews = TokenReviews(review_client, config.reviews)
    writer = StatusWriter(client, interval=config.write_seconds)
    settings = manager.config.settings
    app = status_app(manager.caches, reviews, writer, stop_notice=lambda job: graceful_stop.notice(job, settings))
    webhook = config.webhook
    if webhook:
        layout_webhook.add_route(app, manager.caches.node_list, manager.config.settings.gpu_layout_max_entries,
                                 manager.caches.dra, config.webhook_limits,
                                 verified_clients_only=bool(config.client_ca))
    try:
        await servers.start(app, config.status_addr, "the status endpoint", ssl_context=certificates.context,
                            limits=config.limits, on_refused=count_refusal)
        if labelled is not None:
            await labelled[0].mark(labelled[1], serving=True)
        webhook_trusts = ""
        while True:
            if await renewal.check(client, dt.datetime.now(dt.UTC)):  # a standby that took over may serve an old CA
                trust(manager, config.url, renewal.trusted())
            if webhook and webhook_trusts != renewal.trusted():
                await layout_webhook.install_ca_bundle(client, webhook, renewal.trusted())
                webhook_trusts = renewal.trusted()
            await asyncio.sleep(CA_CHECK_SECONDS)
            if certificates.rotate_if_due(dt.datetime.now(dt.UTC)):
                log.info("status endpoint certificate renewed", not_after=certificates.not_after.isoformat())
    finally:
        await writer.close()
        await reviews.close()
        await review_client.close()
