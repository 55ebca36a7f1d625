"""HTTP endpoints for the kubelet and Prometheus: /healthz and /readyz, and /metrics, on aiohttp.

Probes and metrics listen on separate addresses (controller-runtime's --health-probe-bind-address and
--metrics-bind-address) so a NetworkPolicy can open one to Prometheus without the other. Address "0" disables.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = structlog.get_logger(__name__)
Check = Callable[[], str | None]
"""A readiness or liveness check: None when fine, else why not."""


def parse_address(address: str) -> tuple[str | None, int] | None:
    """':8080' (all interfaces), '127.0.0.1:8080', '[::1]:8080'; '0' or '' turns the endpoint off."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not an address: {address!r} (want [host]:port)")
    host = host.strip("[]")
    return (host or None), int(port)


@dataclass
class Checks:
    healthz: dict[str, Check]
    readyz: dict[str, Check]


def _probe(checks: dict[str, Check]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        failures = {name: why for name, check in checks.items() if (why := check()) is not None}
        if failures:
            text = "".join(f"[-]{name} failed: {why}\n" for name, why in failures.items())
            return web.Response(status=500, text=text)
        if "verbose" in request.query:
            return web.Response(text="".join(f"[+]{name} ok\n" for name in checks) + "ok\n")
        return web.Response(text="ok")

    return handler


def health_app(checks: Checks) -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", _probe(checks.healthz))
    app.router.add_get("/livez", _probe(checks.healthz))
    app.router.add_get("/readyz", _probe(checks.readyz))
    return app


def metrics_app(registry: CollectorRegistry = REGISTRY) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


class Servers:
    """The listening endpoints of one process; `start()` binds, `stop()` closes them."""

    def __init__(self) -> None:
        self._runners: list[web.AppRunner] = []

    async def start(self, app: web.Application, address: str, what: str,
                    ssl_context: ssl.SSLContext | None = None) -> None:
        parsed = parse_address(address)
        if parsed is None:
            return
        host, port = parsed
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context).start()
        log.info("serving " + what, address=address)

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
