"""What every server of the process takes of a request's body (server.Servers adds both to each app): none encoded
(aiohttp would inflate a gzip body as it is read: 3 KiB on the wire, 3 MiB in memory), and, of those the handlers
read through `request_body`, at most --status-body-bytes-in-flight bytes at once across all of a server's
connections. Each refusal is a Status naming its limit, counted through the server's `on_refused`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

# The limits a refusal names, as `on_refused` and the posts' counter are told them (server.py adds the connections').
REQUEST_TIMEOUT = "request_timeout"
ENCODED_BODY, OVER_BODY_BYTES = "content_encoding", "body_bytes_in_flight"
REFUSAL_CODES = {REQUEST_TIMEOUT: 408, ENCODED_BODY: 415, OVER_BODY_BYTES: 503}  # else 0: the connection closed
BODY_WAIT_SECONDS = 1.0  # a body not admitted within this is a 503


def refusal(code: int, reason: str, message: str, retry_after: int | None = None) -> web.Response:
    """A refusal as the apiserver writes one (a Status), with Retry-After when given."""
    response = web.json_response({"kind": "Status", "status": "Failure", "code": code, "reason": reason,
                                  "message": message}, status=code)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def identity_only(on_refused: Callable[[str], None]) -> Any:
    """An aiohttp middleware: a request whose body is encoded (gzip, deflate, br: anything but identity) is a 415
    naming the header, before its body is read."""
    @web.middleware
    async def identity(request: web.Request,
                       handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            on_refused(ENCODED_BODY)
            refused = refusal(415, ENCODED_BODY, f"Content-Encoding {encoding[:40]!a}: this server takes only "
                                                 "bodies that are not encoded (Content-Encoding identity)")
            refused.force_close()  # the body unread: the connection is not worth keeping for it
            return refused
        return await handler(request)

    return identity


class BodyBudget:
    """The bytes of request bodies one server's handlers hold, at most `capacity` (--status-body-bytes-in-flight):
    a body that does not fit waits up to BODY_WAIT_SECONDS for others to end."""

    def __init__(self, capacity: int, on_refused: Callable[[str], None] = lambda limit: None) -> None:
        self.capacity, self.on_refused = capacity, on_refused
        self.held = 0
        self._waiters: set[asyncio.Future[None]] = set()

    async def reserve(self, size: int) -> bool:
        """True, and `size` bytes held; False (counted as refused) when they cannot be within BODY_WAIT_SECONDS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BODY_WAIT_SECONDS
        while self.held + size > self.capacity and size <= self.capacity and (left := deadline - loop.time()) > 0:
            waiter = loop.create_future()
            self._waiters.add(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, left)
            finally:
                self._waiters.discard(waiter)
        if self.held + size > self.capacity:
            self.on_refused(OVER_BODY_BYTES)
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


BODY_BUDGET = web.AppKey("body_budget", BodyBudget)


@contextlib.asynccontextmanager
async def request_body(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The request's body, read within `limit` bytes (else aiohttp's 413) and within its server's BodyBudget: its
    bytes (as declared, else `limit`) are held until the block ends, so a handler parses and answers inside it. A body
    that cannot be held is a 503 naming the flag, before anything is read."""
    budget = request.app.get(BODY_BUDGET)
    size = min(request.content_length if request.content_length is not None else limit, limit)
    if budget is not None and not await budget.reserve(size):
        raise web.HTTPServiceUnavailable(
            headers={"Retry-After": "1"}, content_type="application/json",
            text=refusal(503, OVER_BODY_BYTES, f"other requests' bodies hold the {budget.capacity} bytes this server "
                                               "reads at once (--status-body-bytes-in-flight): retry in 1s").text)
    try:
        yield await request.clone(client_max_size=limit).read()
    finally:
        if budget is not None:
            budget.release(size)
