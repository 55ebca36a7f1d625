"""testkit's fake clock and its wait for loop state: what the tests that no longer sleep stand on."""

from __future__ import annotations

import asyncio

import pytest

from testkit.clock import FakeClock
from testkit.waits import until


def test_a_step_runs_the_timers_due_soonest_first_each_once_and_not_the_cancelled() -> None:
    clock, ran = FakeClock(), []
    clock.call_later(2.0, lambda: ran.append("two"))
    clock.call_later(1.0, lambda: ran.append("one"))
    clock.call_later(1.5, lambda: ran.append("cancelled")).cancel()
    late = clock.call_later(3.0, lambda: ran.append("three"))
    clock.step(0.999)
    assert ran == [] and clock.now() == pytest.approx(1000.999)
    clock.step(1.001)
    assert ran == ["one", "two"]
    clock.step(10)
    assert ran == ["one", "two", "three"] and late.fired and clock.pending() == []
    with pytest.raises(ValueError, match="does not go back"):
        clock.step(-1)


def test_a_callback_sees_the_steps_end_and_arms_from_there() -> None:
    """As client-go's fake clock: the time moves first, then what is due runs; a timer a callback arms counts
    from the new time, so only one due at once (the queue's overdue delayed adds) runs in the same step."""
    clock, ran = FakeClock(), []

    def first() -> None:
        ran.append(("first", clock.now()))
        clock.call_later(0.0, lambda: ran.append(("at once", clock.now())))
        clock.call_later(1.0, lambda: ran.append(("a second later", clock.now())))

    clock.call_later(1.0, first)
    clock.step(3.0)
    assert ran == [("first", 1003.0), ("at once", 1003.0)] and len(clock.pending()) == 1
    clock.step(1.0)
    assert ran[-1] == ("a second later", 1004.0)


async def test_until_returns_once_another_task_made_the_state_and_fails_naming_it_otherwise() -> None:
    flags: list[str] = []

    async def sets_after_three_ticks() -> None:
        for _ in range(3):
            await asyncio.sleep(0)  # no time: three ticks of the loop
        flags.append("set")

    task = asyncio.create_task(sets_after_three_ticks())
    await until(lambda: flags, "the flag set")
    assert flags == ["set"]
    await task
    with pytest.raises(AssertionError, match=r"timed out after 0\.05s waiting until nothing happens"):
        await until(lambda: False, "nothing happens", timeout=0.05)
