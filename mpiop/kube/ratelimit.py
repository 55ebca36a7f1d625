"""The client-side rate limit on requests to the apiserver (``--kube-api-qps`` / ``--kube-api-burst``), as
client-go's flowcontrol token bucket does it."""

from __future__ import annotations

import asyncio
import time


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
