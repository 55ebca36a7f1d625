"""The informer's retry schedule (client-go's reflector backoff) and the supervisor of background tasks."""

from __future__ import annotations

import asyncio

import pytest

from mpiop.api.raw import JSON
from mpiop.controller.supervisor import Supervisor
from mpiop.kube.backoff import Backoff
from mpiop.kube.client import ApiError
from testkit.clock import FakeClock


@pytest.mark.parametrize(("rand", "expected"), [
    (0.0, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]),
    (0.999, [1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 60.0, 60.0]),
], ids=["no-jitter-draw", "largest-jitter-draw"])
def test_the_backoff_doubles_from_0_8_s_to_30_s_each_wait_jittered_up_to_twice(rand: float,
                                                                                 expected: list[float]) -> None:
    clock = FakeClock()
    backoff = Backoff(clock=clock.now, rand=lambda: rand)
    waits = []
    for _ in expected:
        waits.append(backoff.next())
        clock.step(waits[-1])  # the next failure comes right after the wait
    assert waits == pytest.approx(expected, rel=1e-3)


def test_the_backoff_starts_over_after_two_quiet_minutes() -> None:
    clock = FakeClock()
    backoff = Backoff(clock=clock.now, rand=lambda: 0.0)
    assert [backoff.next() for _ in range(4)] == pytest.approx([0.8, 1.6, 3.2, 6.4])
    clock.step(119.0)
    assert backoff.next() == pytest.approx(12.8), "within 2 minutes of the last failure: keeps growing"
    clock.step(121.0)
    assert backoff.next() == pytest.approx(0.8)


def test_a_success_starts_the_backoff_over_at_once() -> None:
    """After a long outage the waits are at their cap; one list that succeeds makes the next failure's wait the
    first step again, not the cap (nor after two quiet minutes only)."""
    clock = FakeClock()
    backoff = Backoff(clock=clock.now, rand=lambda: 0.0)
    assert [backoff.next() for _ in range(8)][-1] == pytest.approx(30.0)
    backoff.reset()
    clock.step(1.0)
    assert [backoff.next() for _ in range(2)] == pytest.approx([0.8, 1.6])


@pytest.mark.parametrize(("status", "body", "expected"), [
    (429, {"reason": "TooManyRequests", "message": "storage is (re)initializing",
           "details": {"retryAfterSeconds": 1}}, 1.0),
    (429, {"reason": "TooManyRequests", "details": {}}, None),
    (500, {"reason": "InternalError", "details": {"retryAfterSeconds": 0}}, None),
    (503, "not a Status", None),
], ids=["asked", "no-details", "zero", "not-a-status"])
def test_the_wait_an_apiserver_asks_for_is_read_off_its_status(status: int, body: JSON | str,
                                                                expected: float | None) -> None:
    assert ApiError(status, body, "WATCH", "/api/v1/pods").retry_after == expected


def test_a_reconnect_storm_is_at_most_a_few_tries_a_minute() -> None:
    """The apiserver down for 5 minutes: client-go's reflector tries ~0.22 times a second at worst."""
    clock = FakeClock()
    backoff = Backoff(clock=clock.now)  # real jitter
    tries = 0
    while clock.now() < 1300.0:
        clock.step(backoff.next())
        tries += 1
    assert tries <= 20, tries  # 0.2 s fixed retries made 1,500 in the same 5 minutes


async def test_a_daemon_that_dies_fails_health_and_sets_stop() -> None:
    supervisor = Supervisor()
    stop = asyncio.Event()
    supervisor.stop_on_failure(stop)

    async def informer() -> None:
        await asyncio.sleep(0)  # no time: it dies after its first suspension, once spawn() has returned
        raise AttributeError("'list' object has no attribute 'get'")

    supervisor.spawn(informer(), name="informer-mpijobs")
    await asyncio.wait_for(stop.wait(), 5)
    assert supervisor.healthz() == "informer-mpijobs died: AttributeError: 'list' object has no attribute 'get'"
    late = asyncio.Event()
    supervisor.stop_on_failure(late)
    assert late.is_set(), "a stop registered after the failure is set at once"


async def test_ends_that_are_not_failures() -> None:
    supervisor = Supervisor()
    stop = asyncio.Event()
    supervisor.stop_on_failure(stop)
    # The coroutines are stand-ins: one that never ends by itself (an hour), ones that end at their first tick.
    forever = supervisor.spawn(asyncio.sleep(3600), name="resync")
    helper = supervisor.spawn(asyncio.sleep(0), name="event", daemon=False)
    await helper
    forever.cancel()
    await asyncio.gather(forever, return_exceptions=True)
    assert supervisor.healthz() is None and not stop.is_set()

    stop.set()  # stopping: a worker that returns is doing what it was asked
    await supervisor.spawn(asyncio.sleep(0), name="worker-0")
    assert supervisor.healthz() is None

    other = Supervisor()
    other.stop_on_failure(asyncio.Event())
    await other.spawn(asyncio.sleep(0), name="worker-1")  # a daemon that returns while not stopping
    assert other.healthz() == "worker-1 ended"


async def test_a_failed_write_cancels_its_siblings_before_the_reconcile_returns() -> None:
    """asyncio.gather returned at the first failure and left the other writes running after the reconcile."""
    from mpiop.controller.reconciler import all_or_none

    finished: list[str] = []
    cancelled: list[str] = []

    async def write(name: str, seconds: float, fail: bool = False) -> str:
        try:
            await asyncio.sleep(seconds)  # the write's answer time: 0, 0.01 or 30 s (cancelled long before)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        if fail:
            raise OSError(f"{name}: connection reset")
        finished.append(name)
        return name

    assert await all_or_none([write("a", 0), write("b", 0.01)]) == ["a", "b"]
    finished.clear()
    with pytest.raises(OSError, match="pod-1: connection reset"):
        await all_or_none([write("pod-0", 0), write("pod-1", 0.01, fail=True), write("pod-2", 30)])
    assert finished == ["pod-0"] and cancelled == ["pod-2"], "nothing still writing once it returned"
