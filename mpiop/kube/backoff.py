"""How long a list or watch that failed waits before trying again, as client-go's reflector does."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """client-go's reflector backoff: `initial` doubling up to `cap`, each wait jittered up to twice as long,
    back to `initial` once `reset_after` seconds passed without one (so at most one try per 30-60 s), or at
    once when a try succeeds (`reset`)."""

    initial: float = 0.8
    cap: float = 30.0
    reset_after: float = 120.0
    factor: float = 2.0
    jitter: float = 1.0
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    _duration: float = field(default=0.0, init=False)
    _last: float = field(default=-math.inf, init=False)

    def reset(self) -> None:
        """A try succeeded: the next failure waits `initial` again, however long the last outage was."""
        self._duration = self.initial
        self._last = -math.inf

    def next(self) -> float:
        """Seconds to wait before the next try."""
        now = self.clock()
        if now - self._last > self.reset_after:
            self._duration = self.initial
        self._last = now
        wait = self._duration
        self._duration = min(self._duration * self.factor, self.cap)
        return wait + self.rand() * self.jitter * wait
