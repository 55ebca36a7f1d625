"""Unit tests for mpiop.controller.workqueue: client-go workqueue guarantees, rate limiters, shutdown."""

from __future__ import annotations

import asyncio
import random

import pytest

from mpiop.controller.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    QueueShutDownError,
    WorkQueue,
    default_controller_rate_limiter,
)
from testkit.clock import FakeClock
from testkit.waits import HANG_GUARD, until


async def drain(q: WorkQueue[str]) -> list[str]:
    """get()+done() every key ready now, in order."""
    got: list[str] = []
    while len(q):
        key = await q.get()
        got.append(key)
        q.done(key)
    return got


@pytest.mark.parametrize(
    ("adds", "expected"),
    [
        (["a"], ["a"]),
        (["a", "a", "a"], ["a"]),
        (["a", "b", "c"], ["a", "b", "c"]),
        (["c", "b", "a"], ["c", "b", "a"]),
        (["a", "b", "a", "c", "b", "a"], ["a", "b", "c"]),
        (["ns/x", "ns/y", "ns/y", "ns/x", "ns/z"], ["ns/x", "ns/y", "ns/z"]),
    ],
    ids=["one", "same-key-thrice", "in-order", "reverse-order", "interleaved-repeats", "namespaced-keys"],
)
async def test_fifo_of_first_add_and_dedup(adds: list[str], expected: list[str]) -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in adds:
        q.add(key)
    assert len(q) == len(expected)
    assert q.adds == len(expected)
    assert await drain(q) == expected
    assert len(q) == 0


async def test_readd_while_processing_gives_exactly_one_more_pass() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")
    q.add("a")
    assert len(q) == 0, "a key being processed must not be handed out again"
    q.add("b")
    assert await q.get() == "b"
    q.done("b")
    q.done("a")
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    q.done("a")  # a double done() is harmless
    assert len(q) == 0


async def test_double_done_does_not_duplicate_a_queued_key() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    await q.get()
    q.add("a")
    q.done("a")
    q.done("a")
    assert len(q) == 1


async def test_many_workers_never_process_a_key_concurrently_and_lose_nothing() -> None:
    rng = random.Random(42)
    q: WorkQueue[str] = WorkQueue()
    keys = [f"ns/job-{i}" for i in range(50)]
    active: set[str] = set()
    tick = 0
    last_add: dict[str, int] = {}
    last_start: dict[str, int] = {}
    passes = 0
    max_active = 0
    settled = asyncio.Event()  # set whenever nothing is queued or being processed

    async def worker() -> None:
        nonlocal tick, passes, max_active
        while True:
            try:
                key = await q.get()
            except QueueShutDownError:
                return
            assert key not in active, f"{key} processed by two workers at once"
            active.add(key)
            max_active = max(max_active, len(active))
            tick += 1
            last_start[key] = tick
            passes += 1
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)  # no time: work of 0-3 ticks, so the workers interleave
            active.discard(key)
            q.done(key)
            if not len(q) and not active:
                settled.set()

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for _ in range(1000):
        key = rng.choice(keys)
        q.add(key)
        tick += 1
        last_add[key] = tick
        if rng.random() < 0.3:
            await asyncio.sleep(0)  # no time: a tick that lets the workers run between some of the adds
    async with asyncio.timeout(HANG_GUARD):
        while len(q) or active:
            settled.clear()
            await settled.wait()
        q.shut_down()
        await asyncio.gather(*workers)

    assert max_active > 1, "the test must actually run workers concurrently"
    assert passes < 1000, "adds of pending keys must be coalesced"
    stale = [k for k in last_add if last_start.get(k, -1) < last_add[k]]
    assert stale == [], "every key added after its last processing started must be processed again"


async def test_add_after_orders_by_due_time() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    for key, delay in [("c", 0.03), ("a", 0.01), ("b", 0.02)]:
        q.add_after(key, delay)
    q.add_after("now", 0)
    assert len(q) == 1
    clock.step(0.025)
    assert len(q) == 3, "a and b are due, c is not yet"
    clock.step(0.005)
    got = []
    async with asyncio.timeout(HANG_GUARD):
        for _ in range(4):
            got.append(await q.get())
    assert got == ["now", "a", "b", "c"]
    assert q.retries == 4


async def test_add_after_earliest_wins_and_fires_once() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    # (key, first delay, second delay): the sooner one wins whichever order they come in.
    cases = [("sooner-second", 1.0, 0.005), ("sooner-first", 0.005, 1.0)]
    for key, first, second in cases:
        q.add_after(key, first)
        q.add_after(key, second)
    clock.step(0.005)
    got = set()
    async with asyncio.timeout(HANG_GUARD):
        for _ in cases:
            key = await q.get()
            got.add(key)
            q.done(key)
    assert got == {key for key, _, _ in cases}
    clock.step(1.0)
    assert len(q) == 0, "the superseded later due time must not add the key again"
    assert clock.timers and not clock.pending()


async def test_add_after_of_a_queued_key_is_deduplicated() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("a")
    q.add_after("a", 0.005)
    clock.step(0.005)
    assert await drain(q) == ["a"]


async def test_in_flight_and_next_delayed_add_say_what_is_left_to_do() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    assert (len(q), q.in_flight(), q.next_delayed_add()) == (0, 0, None)
    q.add_after("later", 30.0)
    q.add_after("sooner", 2.0)
    q.add("now")
    key = await q.get()
    assert (len(q), q.in_flight(), q.next_delayed_add()) == (0, 1, 2.0)
    q.done(key)
    clock.time += 3.0  # "sooner" is overdue (its timer has not fired: time moved, no step ran it): 0, not negative
    assert (q.in_flight(), q.next_delayed_add()) == (0, 0.0)
    clock.step(0)
    assert (len(q), q.next_delayed_add()) == (1, 27.0)
    q.shut_down()
    assert q.next_delayed_add() is None


async def test_waiting_to_start_is_queued_and_not_processing() -> None:
    """What a caller may skip an add for: a key whose processing is still to start sees everything until now."""
    q: WorkQueue[str] = WorkQueue()
    assert not q.waiting_to_start("a")
    q.add_after("a", 30.0)
    assert not q.waiting_to_start("a")  # delayed: not queued yet
    q.add("a")
    assert q.waiting_to_start("a")
    key = await q.get()
    assert not q.waiting_to_start(key)  # processing: a change now may come too late for it
    q.add(key)
    assert not q.waiting_to_start(key)  # dirty again, but queued only at done()
    q.done(key)
    assert q.waiting_to_start(key)
    q.shut_down()


def test_exponential_backoff_sequence_cap_and_forget() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    expected = [min(1000.0, 0.005 * 2**n) for n in range(25)]
    assert expected[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert expected[17] == pytest.approx(655.36)
    assert expected[18:] == [1000.0] * 7
    assert [limiter.when("a") for _ in range(25)] == pytest.approx(expected)
    assert limiter.num_requeues("a") == 25
    assert limiter.when("b") == pytest.approx(0.005), "backoff is per key"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    for _ in range(5000):  # no overflow however many failures
        assert limiter.when("a") <= 1000.0


@pytest.mark.parametrize(
    ("qps", "burst", "steps"),
    [
        # (seconds to advance the clock before the call, expected delay)
        (10.0, 3, [(0, 0.0), (0, 0.0), (0, 0.0), (0, 0.1), (0, 0.2), (0.5, 0.0), (0, 0.0), (0, 0.0), (0, 0.1)]),
        (10.0, 1, [(0, 0.0), (0, 0.1), (0.05, 0.15), (1.0, 0.0)]),
        (2.0, 2, [(0, 0.0), (0, 0.0), (0, 0.5), (100.0, 0.0), (0, 0.0), (0, 0.5)]),
    ],
    ids=["burst-3-then-paced", "burst-1-partial-refill", "long-idle-refills-only-the-burst"],
)
def test_token_bucket(qps: float, burst: int, steps: list[tuple[float, float]]) -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps, burst, clock=clock.now)
    for i, (advance, delay) in enumerate(steps):
        clock.step(advance)
        assert bucket.when(f"k{i}") == pytest.approx(delay), f"step {i}"


def test_default_limiter_is_max_of_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock.now)
    # The burst of 100 covers the first 100 calls: only the per-key backoff counts.
    assert [limiter.when(f"k{i}") for i in range(100)] == pytest.approx([0.005] * 100)
    # Bucket exhausted: 10 qps dominates the small backoff of a fresh key ...
    assert limiter.when("fresh") == pytest.approx(0.1)
    # ... until the key's own backoff grows past it.
    clock.step(100)
    assert [limiter.when("x") for _ in range(6)] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08, 0.16])
    assert limiter.num_requeues("x") == 6
    limiter.forget("x")
    assert limiter.num_requeues("x") == 0
    assert limiter.when("x") == pytest.approx(0.005)

    small = default_controller_rate_limiter(qps=10, burst=1, clock=clock.now)
    assert [small.when("a"), small.when("a"), small.when("b")] == pytest.approx([0.005, 0.1, 0.2])


async def test_add_rate_limited_uses_limiter_and_forget_resets() -> None:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 0.004)
    q = WorkQueue(limiter, clock=clock)
    for _ in range(3):
        q.add_rate_limited("a")
    assert q.num_requeues("a") == 3
    assert q.retries == 3
    assert len(q) == 0, "a rate-limited add is delayed"
    clock.step(0.001)
    async with asyncio.timeout(HANG_GUARD):
        assert await q.get() == "a"
    q.done("a")
    clock.step(0.01)
    assert len(q) == 0, "pending delayed adds of one key collapse into one"
    q.forget("a")
    assert q.num_requeues("a") == 0


async def test_metrics_hooks() -> None:
    clock = FakeClock()
    waits: list[float] = []
    works: list[float] = []
    q: WorkQueue[str] = WorkQueue(clock=clock, on_wait=waits.append, on_work=works.append)
    q.add("a")
    clock.step(2)
    q.add("b")
    clock.step(1)
    assert await q.get() == "a"
    clock.step(1)
    assert await q.get() == "b"
    assert waits == [3.0, 2.0]
    clock.step(4)
    assert q.longest_running() == 5.0
    assert q.unfinished_work() == 9.0
    q.add("a")  # re-added while processing: waits from now, not from get()
    q.done("a")
    assert works == [5.0]
    clock.step(1)
    assert await q.get() == "a"
    assert waits[-1] == 1.0
    q.done("a")
    q.done("b")
    assert q.longest_running() == 0.0
    assert q.adds == 3


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    q: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await until(lambda: q.waiting_getters() == 2, "both getters waiting")
    q.add("a")  # wakes `first` ...
    first.cancel()  # ... which is cancelled before it takes the key
    async with asyncio.timeout(HANG_GUARD):
        assert await second == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_shut_down_wakes_waiting_getters_and_rejects_adds() -> None:
    q: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await until(lambda: q.waiting_getters() == 3, "the three getters waiting")
    q.add("a")
    q.add("b")
    q.add("c")  # more keys than taken: shut_down must drop the rest
    q.add("d")
    await until(lambda: q.in_flight() == 3, "the getters holding a, b and c")
    q.shut_down()
    async with asyncio.timeout(HANG_GUARD):
        results = await asyncio.gather(*getters, q.get(), return_exceptions=True)
    assert results[:3] == ["a", "b", "c"]
    assert isinstance(results[3], QueueShutDownError)
    assert q.shutting_down
    q.add("e")
    q.add_after("e", 0.001)
    q.add_rate_limited("e")
    assert len(q) == 0
    with pytest.raises(QueueShutDownError):
        await q.get()


async def test_shut_down_wakes_idle_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await until(lambda: q.waiting_getters() == 3, "the three getters waiting")
    q.shut_down()
    async with asyncio.timeout(HANG_GUARD):
        results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(r, QueueShutDownError) for r in results)


@pytest.mark.parametrize("ending", ["done", "shut_down", "nothing_in_flight"])
async def test_shut_down_with_drain_waits_for_in_flight(ending: str) -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    if ending != "nothing_in_flight":
        assert await q.get() == "a"
        q.add("a")  # dirty while processing: must not be requeued after shutdown
    drainer = asyncio.create_task(q.shut_down_with_drain())
    await until(lambda: q.shutting_down, "the drain started")
    if ending == "nothing_in_flight":
        await until(drainer.done, "the drain with nothing in flight returned")
    else:
        assert not drainer.done(), "drain must wait for the in-flight key"
        if ending == "done":
            q.done("a")
        else:
            q.shut_down()
    async with asyncio.timeout(HANG_GUARD):
        await drainer
    assert len(q) == 0
    with pytest.raises(QueueShutDownError):
        await q.get()


async def test_nothing_left_pending_after_shutdown() -> None:
    before = asyncio.all_tasks()
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)

    async def worker() -> None:
        with pytest.raises(QueueShutDownError):
            while True:
                q.done(await q.get())

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    q.add_after("late", 10)
    q.add_after("soon", 0.01)
    q.add_rate_limited("retry")
    assert clock.pending()
    q.add("now")
    await until(lambda: not len(q), "a worker took 'now'")
    await q.shut_down_with_drain()
    async with asyncio.timeout(HANG_GUARD):
        await asyncio.gather(*workers)
    assert clock.timers and not clock.pending(), "shutdown cancels the delayed adds' timer"
    assert asyncio.all_tasks() <= before
    clock.step(20)
    assert len(q) == 0, "delayed adds must not fire after shutdown"
