"""Waiting for state that other tasks of the test's own event loop set: ticks of the loop, no wall time.

(`testkit.operator.eventually` polls what lives elsewhere, an apiserver or a process, every 0.1 s.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

HANG_GUARD = 5.0
"""Seconds a wait may take before it fails: a bound against a hang only, where what is asserted is a state and not
a time. Generous: a loaded machine (the suite under stress-ng) can keep this process off the CPU for a second."""


async def until(predicate: Callable[[], object], what: str, timeout: float = HANG_GUARD) -> None:
    """Yield to the event loop until `predicate()` holds: e.g. until the tasks the test started are parked on
    what they wait for. Fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        await asyncio.sleep(0)  # no time: one tick, so every ready task runs a step
