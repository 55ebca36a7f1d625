"""Token buckets: the client-side rate limit on requests to the apiserver (``--kube-api-qps`` /
``--kube-api-burst``), as client-go's flowcontrol token bucket does it; and the servers' budgets by source address
(TokenReviews, GPU layout reviews, new connections), which refuse rather than wait."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from cachetools import LRUCache


class TokenBucket:
    """client-go's token bucket: `burst` requests at once, refilled at `qps` per second."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.capacity = float(max(burst, 1))
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        async with self._lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.qps)
            self.updated = now
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.qps)
                self.tokens = 1.0
                self.updated = time.monotonic()
            self.tokens -= 1


class SourceBudget:
    """A token bucket that refuses rather than waits: `burst` at once, refilled at `qps` a second."""

    def __init__(self, qps: float, burst: int, now: float) -> None:
        self.qps, self.burst = qps, float(burst)
        self.tokens, self.updated = self.burst, now

    def take(self, now: float) -> int:
        """0, and one token spent; else the whole seconds until the next one is there."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.qps)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0
        return max(1, math.ceil((1 - self.tokens) / self.qps)) if self.qps > 0 else 3600


class SourceBudgets:
    """A SourceBudget for each source address, the `sources` most recently used kept: addresses past that (a flood
    from many) forget the least recently used, which starts full again when it comes back."""

    def __init__(self, qps: float, burst: int, sources: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self.budgets: LRUCache[str, SourceBudget] = LRUCache(sources)

    def take(self, source: str) -> int:
        """0, and one of `source`'s tokens spent; else the whole seconds until it has one again."""
        now = self.clock()
        budget = self.budgets.get(source)
        if budget is None:
            budget = self.budgets[source] = SourceBudget(self.qps, self.burst, now)
        return budget.take(now)
