"""A clock a test moves by hand, as client-go's tests use `k8s.io/utils/clock/testing`'s fake clock: time-based
logic (a work queue's delayed adds, a rate limiter, a lease's deadlines, a backoff) checked without sleeping."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class FakeTimer:
    """A callback armed on a `FakeClock`: it runs when a `step` reaches `when`, unless cancelled first."""

    when: float
    callback: Callable[[], None] = field(repr=False)
    cancelled: bool = False
    fired: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Monotonic seconds that move only when the test says: `now()` reads them, `call_later` arms a timer on
    them (mpiop.controller.workqueue's Clock), `step(seconds)` moves them and runs every timer then due."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.timers: list[FakeTimer] = []  # every timer armed, fired and cancelled ones included

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.time + max(0.0, delay), callback)
        self.timers.append(timer)
        return timer

    def step(self, seconds: float) -> None:
        """Move on by `seconds`, then run each timer due by then, soonest first (ties in the order armed), each
        once. A callback sees the new time, and a timer it arms counts from there: one due at once runs too."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock does not go back (step {seconds})")
        self.time += seconds
        while due := [timer for timer in self.pending() if timer.when <= self.time]:
            timer = min(due, key=lambda t: t.when)
            timer.fired = True
            timer.callback()

    def pending(self) -> list[FakeTimer]:
        """The timers neither fired nor cancelled."""
        return [timer for timer in self.timers if not timer.cancelled and not timer.fired]
