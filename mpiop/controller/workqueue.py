"""An asyncio rate-limited work queue with the guarantees of client-go's ``util/workqueue``.

Reconcilers need a queue that neither loses nor duplicates work and never reconciles one object twice at
once. For keys compared by ``hash``/``==`` (here ``"namespace/name"`` strings), :class:`WorkQueue` is:

* Fair: keys are handed out by ``get()`` in the order in which they were added (FIFO; adds of a key that
  is already pending keep its place).
* Stingy: a key added many times before it is processed is processed only once (the *dirty* set).
* Exclusive: a key returned by ``get()`` is not returned again until ``done(key)``, however many workers
  call ``get()`` (the *processing* set).
* Lossless: a key re-added while it is being processed is queued exactly once more, when ``done(key)``
  is called, so a change seen mid-reconcile is always reconciled again.
* Multi-producer, multi-consumer on one event loop; no threads, no locks.
* Shutdown-aware: ``shut_down()`` stops accepting adds, drops queued and delayed keys, and makes every
  waiting and later ``get()`` raise :class:`QueueShutDownError` so workers exit (unlike client-go, whose
  ``Get`` hands out the already-queued keys first). ``await shut_down_with_drain()`` does the same, then
  waits until every in-flight key is ``done()``; a ``shut_down()`` meanwhile cuts that wait short.

Delayed adds (``add_after``) wait in a heap driven by one timer, cancelled on shutdown. If a key is already
waiting, a sooner ``add_after`` moves it earlier and a later one is ignored. Time is read through a
:class:`Clock` (``time.monotonic`` and the running loop's timers by default), so a test steps a fake one
instead of sleeping, as client-go's workqueue tests step ``k8s.io/utils/clock/testing``'s fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)
Now = Callable[[], float]
"""Monotonic seconds; injectable so rate limiters can be tested without sleeping."""


class Timer(Protocol):
    """A callback armed for later (``asyncio.TimerHandle``'s one method the queue uses)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the queue reads time through: ``now()`` (monotonic seconds: when keys were added, when delayed
    adds are due, the rate limiter's refills) and ``call_later`` (the delayed adds' timer)."""

    def now(self) -> float: ...
    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` itself (a builtin, so reading it costs what it did before the clock
    was injectable) and the running loop's timers."""

    now = staticmethod(time.monotonic)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


MONOTONIC = MonotonicClock()


class RateLimiter(Protocol[K_contra]):
    """Decides how long a key waits before its next retry (client-go's ``RateLimiter``).

    ``when`` records one more failure of the key and returns the seconds to wait; ``forget`` stops tracking
    the key (it succeeded or was given up on); ``num_requeues`` is how many failures are being tracked.
    """

    def when(self, key: K_contra) -> float: ...
    def forget(self, key: K_contra) -> None: ...
    def num_requeues(self, key: K_contra) -> int: ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per-key ``base_delay * 2**failures`` capped at ``max_delay``, so one broken object cannot hot-loop."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base, self._max = base_delay, max_delay
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        return min(self._max, self._base * 2.0 ** min(exp, 1000))  # min(exp, ...) keeps 2.0**exp finite

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """Token bucket over all keys (``qps`` refill, ``burst`` size, initially full), bounding total retry rate.

    Like ``rate.Limiter.Reserve().Delay()``: every call takes a token, going into debt when empty.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Now = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self._qps, self._burst, self._clock = qps, float(burst), clock
        self._tokens, self._last = self._burst, clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + max(0.0, now - self._last) * self._qps) - 1.0
        self._last = now
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter(Generic[K]):
    """Asks every limiter (each records the failure) and returns the longest wait."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        self._limiters = limiters

    def when(self, key: K) -> float:
        return max([limiter.when(key) for limiter in self._limiters], default=0.0)

    def forget(self, key: K) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return max((limiter.num_requeues(key) for limiter in self._limiters), default=0)


QUEUE_QPS = 10.0  # client-go's DefaultControllerRateLimiter: 10 adds/s overall...
QUEUE_BURST = 100  # ...after a burst of 100


def default_controller_rate_limiter(
    *,
    qps: float = QUEUE_QPS,
    burst: int = QUEUE_BURST,
    base_delay: float = 0.005,
    max_delay: float = 1000.0,
    clock: Now = time.monotonic,
) -> MaxOfRateLimiter[Hashable]:
    """client-go's ``DefaultControllerRateLimiter``: per-key exponential backoff, and an overall bucket."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay, max_delay), BucketRateLimiter(qps, burst, clock=clock)
    )


class QueueShutDownError(Exception):
    """Raised by ``WorkQueue.get()`` once the queue is shut down, so worker loops end."""


class WorkQueue(Generic[K]):
    """Rate-limited, delaying work queue; see the module docstring for its guarantees.

    Metrics hooks (no metrics library here): ``adds`` counts keys that became pending, ``retries`` counts
    ``add_after``/``add_rate_limited`` calls, ``len()`` is the depth; ``on_wait(seconds)`` is called with how
    long a key waited between being added and ``get()``, ``on_work(seconds)`` with how long it was processed;
    ``longest_running()``, ``unfinished_work()`` and ``in_flight()`` report on the keys being processed now,
    ``next_delayed_add()`` on the delayed adds, ``waiting_getters()`` on the idle workers.
    ``clock`` is read on every add and get and arms the delayed adds' timer; the default rate limiter reads
    it too. A test passes a fake one and steps it (testkit's ``FakeClock``), which also shows whether any
    timer is left pending.
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[K] | None = None,
        *,
        clock: Clock = MONOTONIC,
        on_wait: Callable[[float], None] | None = None,
        on_work: Callable[[float], None] | None = None,
    ) -> None:
        self._limiter: RateLimiter[K] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock=clock.now)
        )
        # The bound method, looked up once: the hot path reads the time as cheaply as before.
        self._now, self._call_later = clock.now, clock.call_later
        self._on_wait, self._on_work = on_wait, on_work
        self._queue: deque[K] = deque()  # ready keys, in order; each is dirty and not processing
        self._dirty: dict[K, float] = {}  # keys that need processing -> when they became dirty
        self._processing: dict[K, float] = {}  # keys handed out by get() -> when
        self._getters: deque[asyncio.Future[None]] = deque()
        self._idle = asyncio.Event()  # set when nothing is processing (for shut_down_with_drain)
        self._shutting_down = self._drain = False
        self._heap: list[tuple[float, int, K]] = []  # delayed adds; entries not matching _waiting are stale
        self._waiting: dict[K, float] = {}  # key -> earliest time it is due
        self._seq = itertools.count()  # heap tie-breaker, so keys are never compared
        self._timer: Timer | None = None
        self.adds = 0
        self.retries = 0

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing; a no-op if it already is or the queue is shut down."""
        if self._shutting_down or key in self._dirty:
            return
        self.adds += 1
        self._dirty[key] = self._now()
        if key not in self._processing:
            self._queue.append(key)
            self._wake_one()

    async def get(self) -> K:
        """Wait for the next key and mark it processing; the caller must call ``done(key)`` afterwards."""
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDownError
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._getters.remove(waiter)
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # we were woken for a key we will not take: pass the wake-up on
                raise
        key = self._queue.popleft()
        now = self._now()
        added = self._dirty.pop(key)
        self._processing[key] = now
        if self._on_wait is not None:
            self._on_wait(now - added)
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``, queueing it again if it was re-added meanwhile.

        A no-op for a key that is not being processed, so a double ``done()`` cannot queue a key twice.
        """
        started = self._processing.pop(key, None)
        if started is None:
            return
        if self._on_work is not None:
            self._on_work(self._now() - started)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one()
        if not self._processing:
            self._idle.set()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; if it is already waiting, the sooner time wins."""
        if self._shutting_down:
            return
        self.retries += 1
        if delay <= 0:
            self.add(key)
            return
        due = self._now() + delay
        if due >= self._waiting.get(key, math.inf):
            return
        self._waiting[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        if self._timer is None or self._heap[0][0] == due:
            self._schedule()

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` once the rate limiter allows (a retry after a failure)."""
        if not self._shutting_down:
            self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure backoff (after success or giving up); ``done()`` is still needed."""
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._limiter.num_requeues(key)

    def waiting_to_start(self, key: K) -> bool:
        """Whether ``key`` is queued and not being processed: ``get()`` will hand it out, so its processing
        starts after anything that happened until now."""
        return key in self._dirty and key not in self._processing

    def waiting_getters(self) -> int:
        """``get()`` calls waiting for a key: the idle workers."""
        return len(self._getters)

    def in_flight(self) -> int:
        """Keys handed out by ``get()`` and not ``done()`` yet."""
        return len(self._processing)

    def next_delayed_add(self) -> float | None:
        """Seconds until the soonest delayed add comes due (0 if overdue), or None if none is waiting."""
        if not self._waiting:
            return None
        return max(0.0, min(self._waiting.values()) - self._now())

    def longest_running(self) -> float:
        """Seconds the longest-running key in processing has been at it (0 if none); spots stuck workers."""
        now = self._now()
        return max((now - t for t in self._processing.values()), default=0.0)

    def unfinished_work(self) -> float:
        """Total seconds the keys in processing have been at it."""
        now = self._now()
        return sum(now - t for t in self._processing.values())

    def shut_down(self) -> None:
        """Stop: ignore adds, drop pending keys, make ``get()`` raise; also ends a ``shut_down_with_drain``."""
        self._drain = False
        self._idle.set()
        self._stop()

    async def shut_down_with_drain(self) -> None:
        """Like ``shut_down()``, then wait until every in-flight key has been ``done()``."""
        self._drain = True
        self._stop()
        while self._processing and self._drain:
            self._idle.clear()
            await self._idle.wait()

    def _stop(self) -> None:
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for pending in (self._heap, self._waiting, self._queue, self._dirty):
            pending.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            self._timer = self._call_later(max(0.0, self._heap[0][0] - self._now()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._now()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) == due:
                del self._waiting[key]
                self.add(key)
        self._schedule()
