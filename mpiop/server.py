"""HTTP endpoints for the kubelet and Prometheus: /healthz and /readyz, and /metrics, on aiohttp; and the listening
of every server the process runs (the status endpoint's too), each within `Limits`.

Probes and metrics listen on separate addresses (controller-runtime's --health-probe-bind-address and
--metrics-bind-address) so a NetworkPolicy can open one to Prometheus without the other. Address "0" disables.

Every pod of every tenant can reach the status endpoint, so a server bounds what a client may hold: connections (in
all, and from one address) and how fast one address opens them, counted from the moment they are accepted, before
any TLS, so a refused one costs a close and no handshake; how long a connection may take over its handshake, a
request's headers or idling between requests; and the headers' size. aiohttp alone bounds none of the first three. A
request's body is never inflated (a Content-Encoding other than identity is a 415 before it is read: 3 KiB of gzip
are 3 MiB once read), and the bodies the handlers read (request_bodies.request_body) are bounded in bytes across all
the server's connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from mpiop.kube.ratelimit import SourceBudgets
from mpiop.request_bodies import BODY_BUDGET, REQUEST_TIMEOUT, BodyBudget, identity_only, refusal

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


class EveryMinute(logging.Filter):
    """At most `records` records a minute pass: aiohttp logs a traceback for each request it refuses to parse (too
    many headers, a line too long), and anyone who reaches the endpoint may send a thousand a second."""

    def __init__(self, records: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.records, self.clock = records, clock
        self.window, self.passed, self.dropped = clock(), 0, 0
        self.seen = 0  # every record, passed or dropped, since the process started

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen += 1
        now = self.clock()
        if now - self.window >= 60:
            if self.dropped:
                record.msg = f"{record.msg} ({self.dropped} more such records dropped in the last minute)"
            self.window, self.passed, self.dropped = now, 0, 0
        if self.passed >= self.records:
            self.dropped += 1
            return False
        self.passed += 1
        return True


REQUEST_ERRORS = logging.getLogger("mpiop.server.requests")  # aiohttp's request errors, within EveryMinute
_REQUEST_ERRORS_LIMIT = EveryMinute()
REQUEST_ERRORS.addFilter(_REQUEST_ERRORS_LIMIT)


def request_errors() -> int:
    """Requests every server of the process refused to parse so far (logged or not). Each leaves cyclic garbage that
    holds what was read: aiohttp keeps the parser's exception, whose traceback holds the frame that read the chunk
    (up to 256 KiB of a flood's headers), and that frame's list holds the exception. Only the cyclic GC frees it, and
    from the oldest generation (a connection lives long enough to get there) a collection may be hours away:
    `mpiop run` collects when this grew (process_resources.trim_every)."""
    return _REQUEST_ERRORS_LIMIT.seen


@dataclass(frozen=True)
class Limits:
    """What the clients of one server may hold (`mpiop run`'s --status-* flags; each default is here, once)."""

    max_connections: int = 1000  # open at once, in all
    # Open at once from one address: a pod; a node's hostNetwork pods; the apiserver calling the GPU layout webhook,
    # a connection per job created at once (its failurePolicy Ignore: past this, a job is laid out after it is made).
    max_connections_per_source: int = 100
    # New connections a second from one address, and at once: each admitted one costs a TLS handshake, and a client
    # refused an answer (a 415 closes) may reconnect at once. 20 a second is a connection every 5.5 s for each of a
    # node's 110 pods (the kubelet's max-pods; progress_client posts every 10 s, a connection each), and the
    # apiserver keeps its connections to the webhook alive (its reviews have their own budget, 20 a second); the
    # burst lets a source open all of max_connections_per_source at once (a job's ranks posting together).
    connections_per_source_qps: float = 20.0
    connections_per_source_burst: int = 100
    sources: int = 10_000  # sources whose connection budget is kept, the least recently seen dropped
    idle_seconds: float = 10.0  # to finish the TLS handshake, to send a whole request's headers, idle between requests
    max_headers: int = 32  # header lines of one request
    max_header_bytes: int = 8190  # the request line, and each header line (a pod's token is ~1 KiB)
    request_seconds: float = 30.0  # once a request's headers are in: its body read and its answer sent
    # Bytes of request bodies read at once, all connections together (what each declares, or its route's limit):
    # ten of the GPU layout webhook's largest reviews, or 256 of the largest progress posts.
    body_bytes_in_flight: int = 16 * 1024 * 1024

    def handler_args(self) -> dict[str, Any]:
        """aiohttp's: its keep-alive timeout also closes a connection that has not sent a whole request's headers
        that long after it opened or after its last answer (a slowloris); and no body is inflated (aiohttp would
        inflate a gzip body as it is read, past whatever the compressed bytes told)."""
        return {"keepalive_timeout": self.idle_seconds, "max_line_size": self.max_header_bytes,
                "max_field_size": self.max_header_bytes, "max_headers": self.max_headers, "logger": REQUEST_ERRORS,
                "auto_decompress": False}


# The limits a refusal names, as `on_refused` and the posts' counter are told them.
OVER_CONNECTIONS, OVER_SOURCE_CONNECTIONS = "too_many_connections", "too_many_source_connections"
OVER_SOURCE_RATE = "too_fast_source_connections"


def request_deadline(limits: Limits, on_refused: Callable[[str], None]) -> Any:
    """An aiohttp middleware: a request not answered `request_seconds` after its headers came (a body sent a byte at
    a time, to any route: the status posts', the GPU layout webhook's) is a 408 naming the flag."""
    @web.middleware
    async def deadline(request: web.Request,
                       handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            async with asyncio.timeout(limits.request_seconds):
                return await handler(request)
        except TimeoutError:
            on_refused(REQUEST_TIMEOUT)
            return refusal(408, REQUEST_TIMEOUT, f"the request was not read and answered within "
                                                 f"{limits.request_seconds:g}s (--status-request-seconds)")

    return deadline


@dataclass
class ConnectionGate:
    """The connections one server has open, by source address; `admit` says which limit refuses another, if any."""

    limits: Limits
    what: str
    on_refused: Callable[[str], None] = lambda limit: None
    clock: Callable[[], float] = time.monotonic
    open: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    refused: int = 0  # since the last warning, which is at most one a minute
    warned: float = -math.inf
    budgets: SourceBudgets = field(init=False)  # new connections by source

    def __post_init__(self) -> None:
        self.budgets = SourceBudgets(self.limits.connections_per_source_qps, self.limits.connections_per_source_burst,
                                     self.limits.sources, self.clock)

    def admit(self, source: str) -> str | None:
        """None, and the connection counted; or the limit that refuses it (OVER_CONNECTIONS,
        OVER_SOURCE_CONNECTIONS, OVER_SOURCE_RATE). Only a connection within the first two spends its source's
        budget of new connections: one closed at once costs no handshake."""
        limits = self.limits
        if self.open >= limits.max_connections:
            refused: str | None = OVER_CONNECTIONS
        elif self.by_source.get(source, 0) >= limits.max_connections_per_source:
            refused = OVER_SOURCE_CONNECTIONS
        elif self.budgets.take(source) > 0:
            refused = OVER_SOURCE_RATE
        else:
            refused = None
        if refused is not None:
            self.refused += 1
            if (now := self.clock()) - self.warned >= 60:
                log.warning(f"{self.what}: connections closed at a limit (--status-max-connections, "
                            "--status-max-connections-per-source, --status-connections-per-source-qps, "
                            "--status-connections-per-source-burst)", limit=refused, source=source,
                            open=self.open, refused=self.refused, max_connections=limits.max_connections,
                            max_connections_per_source=limits.max_connections_per_source,
                            connections_per_source_qps=limits.connections_per_source_qps,
                            connections_per_source_burst=limits.connections_per_source_burst)
                self.warned, self.refused = now, 0
            self.on_refused(refused)
            return refused
        self.open += 1
        self.by_source[source] = self.by_source.get(source, 0) + 1
        return None

    def release(self, source: str) -> None:
        self.open -= 1
        left = self.by_source.pop(source, 1) - 1
        if left > 0:
            self.by_source[source] = left


class _Connection(asyncio.Protocol):
    """One admitted connection, as the loop hands it over (after its TLS handshake): passed on to aiohttp's
    protocol, and released from the gate when it ends, or when it never came to be (`release` is idempotent)."""

    def __init__(self, gate: ConnectionGate, source: str, handler: asyncio.Protocol) -> None:
        self.gate, self.source, self.handler = gate, source, handler
        self.counted = True

    def release(self) -> None:
        if self.counted:
            self.counted = False
            self.gate.release(self.source)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self.handler.connection_lost(exc)
        finally:
            self.release()


def trust_clients(context: ssl.SSLContext, ca_file: str) -> None:
    """Have `context` ask every client for a certificate and verify one given against `ca_file` (PEM); a client
    that gives none still connects (the jobs' pods post without one): a handler reads `peercert` to tell."""
    context.load_verify_locations(cafile=ca_file)
    context.verify_mode = ssl.CERT_OPTIONAL


def listening_socket(host: str | None, port: int) -> socket.socket:
    """Bound and listening, non-blocking: `host` None is every interface (IPv4 and, where the host has it, IPv6)."""
    if host is None:
        dual = socket.has_dualstack_ipv6()
        sock = socket.create_server(("", port), family=socket.AF_INET6 if dual else socket.AF_INET,
                                    dualstack_ipv6=dual, backlog=1024)
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
    sock.setblocking(False)
    return sock


class _Listener:
    """Accepts connections itself, so that each is counted from its accept, before any TLS: one past the gate's
    limits is closed at once; one admitted is given to the loop, which does its TLS handshake (within
    idle_seconds) and hands it to aiohttp."""

    def __init__(self, sock: socket.socket, gate: ConnectionGate, make_handler: Callable[[], asyncio.Protocol],
                 context: ssl.SSLContext | None) -> None:
        self.sock, self.gate, self.make_handler, self.context = sock, gate, make_handler, context
        self.handshakes: set[asyncio.Task[None]] = set()
        self.accepting = asyncio.get_running_loop().create_task(self._accept(), name=f"accept: {gate.what}")

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(self.sock)
            except OSError as error:  # e.g. out of file descriptors: try again shortly rather than spin or stop
                log.warning(f"{self.gate.what}: accept failed", error=str(error))
                await asyncio.sleep(0.1)
                continue
            source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if self.gate.admit(source) is not None:
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: no TIME_WAIT
                conn.close()
                continue
            task = loop.create_task(self._hand_over(conn, _Connection(self.gate, source, self.make_handler())))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _hand_over(self, conn: socket.socket, connection: _Connection) -> None:
        handshake = self.gate.limits.idle_seconds if self.context is not None else None
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: connection, conn, ssl=self.context, ssl_handshake_timeout=handshake)
        except (OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError):  # a failed or slow handshake
            conn.close()
            connection.release()

    async def close(self) -> None:
        self.accepting.cancel()
        for task in list(self.handshakes):
            task.cancel()
        await asyncio.gather(self.accepting, *self.handshakes, return_exceptions=True)
        self.sock.close()


@dataclass
class _Listening:
    runner: web.AppRunner
    listener: _Listener


class Servers:
    """The listening endpoints of one process; `start()` binds, `stop()` closes them."""

    def __init__(self) -> None:
        self._listening: list[_Listening] = []

    async def start(self, app: web.Application, address: str, what: str,
                    ssl_context: ssl.SSLContext | None = None, limits: Limits | None = None,
                    on_refused: Callable[[str], None] = lambda limit: None) -> ConnectionGate | None:
        """Serve `app` on `address` within `limits` (`on_refused(limit)` for each connection refused and each request
        past its deadline or body refused: REFUSAL_CODES); its gate, None when the address turns it off."""
        parsed = parse_address(address)
        if parsed is None:
            return None
        host, port = parsed
        limits = limits if limits is not None else Limits()
        app.middlewares.extend([request_deadline(limits, on_refused), identity_only(on_refused)])
        app[BODY_BUDGET] = BodyBudget(limits.body_bytes_in_flight, on_refused)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True,
                               **limits.handler_args())
        await runner.setup()
        handler = runner.server
        assert handler is not None  # set up above
        try:
            sock = listening_socket(host, port)
        except BaseException:
            await runner.cleanup()
            raise
        gate = ConnectionGate(limits, what, on_refused)
        self._listening.append(_Listening(runner, _Listener(sock, gate, handler, ssl_context)))
        log.info("serving " + what, address=address)
        return gate

    async def stop(self) -> None:
        for listening in reversed(self._listening):
            await listening.listener.close()
            await listening.runner.cleanup()
        self._listening.clear()
