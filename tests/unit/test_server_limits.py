"""mpiop.server's limits: the connections a server admits (in all, from one address), counted from accept to close
whatever happens between, idle connections closed, and aiohttp's request errors logged at most 10 a minute."""

from __future__ import annotations

import asyncio
import gzip
import logging
import ssl

import aiohttp
import pytest
from aiohttp import web

from devcluster.controlplane import free_port
from mpiop.certs import Certificates
from mpiop.request_bodies import BODY_BUDGET, ENCODED_BODY, OVER_BODY_BYTES, BodyBudget, request_body
from mpiop.server import (
    OVER_CONNECTIONS,
    OVER_SOURCE_CONNECTIONS,
    OVER_SOURCE_RATE,
    ConnectionGate,
    EveryMinute,
    Limits,
    Servers,
)
from testkit.operator import eventually


def test_the_gate_admits_within_both_limits_and_counts_until_release() -> None:
    refused: list[str] = []
    gate = ConnectionGate(Limits(max_connections=3, max_connections_per_source=2), "test", refused.append)
    assert [gate.admit(s) for s in ("a", "a", "a", "b", "c")] == [None, None, OVER_SOURCE_CONNECTIONS, None,
                                                                   OVER_CONNECTIONS]
    assert refused == [OVER_SOURCE_CONNECTIONS, OVER_CONNECTIONS]
    gate.release("a")
    assert gate.admit("c") is None
    for source in ("a", "b", "c"):
        gate.release(source)
    assert (gate.open, gate.by_source) == (0, {})


def test_the_gate_admits_new_connections_of_a_source_within_its_rate_and_burst() -> None:
    """Burst 3, 2 a second: a fourth at once is refused (nothing counted), another source has its own budget, half
    a second refills one; a source refused for holding too many spends none of its budget."""
    now: list[float] = [0.0]
    refused: list[str] = []
    gate = ConnectionGate(Limits(max_connections_per_source=4, connections_per_source_qps=2.0,
                                 connections_per_source_burst=3), "test", refused.append, clock=lambda: now[0])
    assert [gate.admit("a") for _ in range(4)] == [None, None, None, OVER_SOURCE_RATE]
    assert (gate.open, gate.by_source) == (3, {"a": 3})
    assert gate.admit("b") is None
    now[0] = 0.5
    assert [gate.admit("a"), gate.admit("a")] == [None, OVER_SOURCE_CONNECTIONS]
    assert refused == [OVER_SOURCE_RATE, OVER_SOURCE_CONNECTIONS]
    for _ in range(4):
        gate.release("a")
    now[0] = 2.0  # 1.5 s: three tokens, none spent by the refusal at the count
    assert [gate.admit("a") for _ in range(4)] == [None, None, None, OVER_SOURCE_RATE]


def test_the_gates_budgets_keep_the_most_recent_sources() -> None:
    gate = ConnectionGate(Limits(connections_per_source_burst=1, sources=2), "test", clock=lambda: 0.0)
    assert [gate.admit(source) for source in ("a", "b", "c")] == [None, None, None]
    assert len(gate.budgets.budgets) == 2 and "a" not in gate.budgets.budgets
    assert gate.admit("c") == OVER_SOURCE_RATE


def test_request_errors_are_logged_at_most_ten_a_minute() -> None:
    now = [0.0]
    limit = EveryMinute(clock=lambda: now[0])
    records = [logging.LogRecord("aiohttp", logging.ERROR, __file__, 1, "Error handling request", None, None)
               for _ in range(16)]
    assert [limit.filter(r) for r in records[:15]] == [True] * 10 + [False] * 5
    now[0] = 60.0
    assert limit.filter(records[15])
    assert records[15].getMessage() == "Error handling request (5 more such records dropped in the last minute)"


async def _closed(reader: asyncio.StreamReader, within: float) -> None:
    """Returns once the server closed the connection (what it still had to send read first); TimeoutError past
    `within` seconds."""
    async with asyncio.timeout(within):
        try:
            while await reader.read(65536):
                pass
        except OSError:
            pass


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_server_refuses_past_its_limits_and_closes_what_idles(tls: bool) -> None:
    certificates = Certificates(["127.0.0.1"]) if tls else None
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=str(request.remote))

    app = web.Application()
    app.router.add_get("/", hello)
    servers, port = Servers(), free_port()
    refused: list[str] = []
    gate = await servers.start(app, f"127.0.0.1:{port}", "test", certificates.context if certificates else None,
                               Limits(max_connections=10, max_connections_per_source=2, idle_seconds=0.5),
                               refused.append)
    assert gate is not None
    context = ssl.create_default_context(cadata=certificates.ca_pem) if certificates else None
    try:
        first = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        second = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        first[1].write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await first[0].readline()).startswith(b"HTTP/1.1 200")
        if context is None:  # closed at once: the first read sees it
            third = await asyncio.open_connection("127.0.0.1", port)
            await _closed(third[0], within=2)
        else:  # closed before the handshake
            with pytest.raises((OSError, ssl.SSLError)):
                await asyncio.open_connection("127.0.0.1", port, ssl=context)
        assert refused == [OVER_SOURCE_CONNECTIONS]
        # Both idle (one after its answer, one that never asked): closed, and the gate counts none.
        await _closed(first[0], within=10)
        await _closed(second[0], within=10)

        async def released() -> bool:
            return gate.open == 0

        await eventually(released, timeout=10, what="the gate released")
    finally:
        await servers.stop()


async def test_a_request_whose_body_never_comes_is_a_408_naming_the_flag() -> None:
    """Past its headers, a request held the connection as long as its body took (the webhook reads up to 3 MiB)."""
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application()
    app.router.add_post("/", echo)
    servers, port = Servers(), free_port()
    refused: list[str] = []
    await servers.start(app, f"127.0.0.1:{port}", "test", None, Limits(request_seconds=0.5), refused.append)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")  # and no more
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 408")
        answer = await asyncio.wait_for(reader.read(4096), 10)
        assert b'"reason": "request_timeout"' in answer and b"(--status-request-seconds)" in answer
        assert refused == ["request_timeout"]
        writer.close()
    finally:
        await servers.stop()


async def test_an_encoded_body_is_a_415_naming_the_header_before_it_is_read() -> None:
    """aiohttp would inflate a gzip body as it is read: 3 KiB on the wire, 3 MiB in memory. Refused on every route,
    the body never read (the handler never runs)."""
    ran: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        ran.append(await request.read())
        return web.Response(body=ran[-1])

    app = web.Application()
    app.router.add_post("/any", echo)
    servers, port = Servers(), free_port()
    refused: list[str] = []
    await servers.start(app, f"127.0.0.1:{port}", "test", None, Limits(), refused.append)
    try:
        bomb = gzip.compress(b" " * (1024 * 1024))
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{port}/any", data=bomb,
                                    headers={"Content-Encoding": "gzip"}) as answer:
                assert answer.status == 415
                assert "Content-Encoding 'gzip'" in (await answer.json())["message"]
            async with session.post(f"http://127.0.0.1:{port}/any", data=b"plain",
                                    headers={"Content-Encoding": "identity"}) as answer:
                assert (answer.status, await answer.read()) == (200, b"plain")
        assert ran == [b"plain"] and refused == [ENCODED_BODY]
    finally:
        await servers.stop()


async def test_bodies_in_flight_wait_for_room_and_past_the_wait_are_refused() -> None:
    refused: list[str] = []
    budget = BodyBudget(100, refused.append)
    assert await budget.reserve(60)
    second = asyncio.create_task(budget.reserve(60))  # waits for the first to end
    await asyncio.sleep(0)
    assert not second.done()
    budget.release(60)
    assert await second and budget.held == 60
    assert not await budget.reserve(50)  # nobody ends within BODY_WAIT_SECONDS
    assert not await budget.reserve(101)  # never fits: refused at once
    assert refused == [OVER_BODY_BYTES, OVER_BODY_BYTES] and budget.held == 60


async def test_a_body_the_budget_cannot_hold_is_a_503_naming_the_flag_and_nothing_is_read() -> None:
    read: list[int] = []

    async def handler(request: web.Request) -> web.Response:
        async with request_body(request, 1024 * 1024) as body:
            read.append(len(body))
            return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/", handler)
    servers, port = Servers(), free_port()
    refused: list[str] = []
    await servers.start(app, f"127.0.0.1:{port}", "test", None, Limits(body_bytes_in_flight=1000), refused.append)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{port}/", data=b"x" * 1001) as answer:
                assert (answer.status, answer.headers["Retry-After"]) == (503, "1")
                assert "(--status-body-bytes-in-flight)" in (await answer.json())["message"]
            async with session.post(f"http://127.0.0.1:{port}/", data=b"x" * 1000) as answer:
                assert answer.status == 200
        assert read == [1000] and refused == [OVER_BODY_BYTES]
        assert app[BODY_BUDGET].held == 0
    finally:
        await servers.stop()
