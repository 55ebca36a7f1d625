"""Waiting out an apiserver that does not answer, and noticing within a second or two that it is back.

An informer whose list or watch could not reach the apiserver (connection refused or reset, a broken stream,
timed out) waits its backoff, which grows to client-go's 30 s (60 s jittered) during a long outage: alone, it
would notice the apiserver's return up to a minute late, and every informer on its own schedule. Instead,
while any informer of a client waits, one probe per client (GET /readyz, which every client may read: the
default system:public-info-viewer role) asks every `interval` seconds (jittered), one small request for all
the informers together; the first answer ends every wait, each after its own jitter (up to `spread`), so the
informers list again together but not in one instant. The informer waits here too after a 503 (a restarted
apiserver answers one for a CRD's path until it has installed it, after its /readyz is already ok: then the
informer tries again about once per probe interval). Any other error status is an apiserver that is up: its
callers wait their backoff, or what it asked for (retryAfterSeconds), and are not woken early.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import structlog

from mpiop.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

READYZ = "/readyz"

_SHARED: weakref.WeakKeyDictionary[KubeClient, Reachability] = weakref.WeakKeyDictionary()


def unreachable(error: BaseException) -> bool:
    """Whether `error` may mean the apiserver does not answer: no HTTP status (refused, reset, a broken stream,
    timed out), as opposed to an answer with an error status (ApiError)."""
    return isinstance(error, aiohttp.ClientError | TimeoutError | OSError) and not isinstance(
        error, aiohttp.ClientResponseError)


@dataclass(eq=False)
class Reachability:
    """One client's probe of its apiserver, shared by every informer that waits for it (see `of`)."""

    client: weakref.ref[KubeClient]  # weak: `_SHARED` must not keep a closed client alive through its value
    interval: float = 1.0
    spread: float = 0.5
    probe_timeout: float = 5.0
    rand: Callable[[], float] = random.random
    _waiters: int = field(default=0, init=False)
    _answered: asyncio.Future[None] | None = field(default=None, init=False)
    _prober: asyncio.Task[None] | None = field(default=None, init=False)

    @classmethod
    def of(cls, client: KubeClient) -> Reachability:
        """The one Reachability of `client` (made on first use)."""
        found = _SHARED.get(client)
        if found is None:
            found = _SHARED[client] = cls(weakref.ref(client))
        return found

    async def wait(self, seconds: float) -> bool:
        """Sleep `seconds`, or less: until the apiserver answers a probe made meanwhile (then after a jitter of up
        to `spread`). True when it answered."""
        if self._answered is None or self._answered.done():
            self._answered = asyncio.get_running_loop().create_future()
        answered = self._answered
        self._waiters += 1
        if self._prober is None or self._prober.done():
            self._prober = asyncio.create_task(self._probe(), name="apiserver-probe")
        try:
            await asyncio.wait_for(asyncio.shield(answered), seconds)
        except TimeoutError:
            return False
        finally:
            self._waiters -= 1
        await asyncio.sleep(self.rand() * self.spread)
        return True

    async def _probe(self) -> None:
        """Ask every `interval` (jittered by half) while anyone waits; the first answer wakes them all."""
        while self._waiters:
            await asyncio.sleep(self.interval * (0.5 + self.rand()))
            if self._waiters and await self.answers():
                log.info("apiserver answers again", probe=READYZ)
                if self._answered is not None and not self._answered.done():
                    self._answered.set_result(None)
                return

    async def answers(self) -> bool:
        """Whether the apiserver gives /readyz an HTTP answer that is not a server error (403 counts: it is up
        and authorizing; 500 is an apiserver still starting)."""
        client = self.client()
        if client is None:
            return False
        try:
            await client.request_raw("GET", READYZ, timeout=self.probe_timeout, accept="text/plain")
        except ApiError as error:
            return error.status < 500
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False
        return True

    async def close(self) -> None:
        """Stop the probe (a test's or a process's end)."""
        if self._prober is not None and not self._prober.done():
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
