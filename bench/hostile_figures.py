"""What `python -m bench.hostile` makes of what it sampled, and the issue's targets: pure functions of the samples
(tests/unit/test_bench_hostile.py), so a window's figures do not depend on how they were taken."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

# The targets of the issue: the flood and the hostile job together may cost the leader at most this.
RSS_GROWTH_MB = 20.0
LOOP_LAG_S = 1.0
FIRST_STATUS_RATIO = 2.0


@dataclass(frozen=True)
class Probe:
    """One GET /healthz: when it was sent (monotonic), seconds until answered (None: no answer), its HTTP code."""

    sent: float
    seconds: float | None
    code: int = 0


@dataclass(frozen=True)
class Lag:
    """The health probes of a window: the slowest answer (the event loop's longest stall, seen from outside), the
    99th percentile, how many took over LOOP_LAG_S, and how many got no answer at all."""

    probes: int
    worst_s: float | None
    p99_s: float | None
    over_target: int
    unanswered: int


def loop_lag(probes: Sequence[Probe], start: float, end: float) -> Lag:
    """The probes sent in [start, end)."""
    within = [p for p in probes if start <= p.sent < end]
    answered = sorted(round(p.seconds, 3) for p in within if p.seconds is not None)
    p99 = answered[max(1, math.ceil(0.99 * len(answered))) - 1] if answered else None
    return Lag(len(within), answered[-1] if answered else None, p99,
               sum(s > LOOP_LAG_S for s in answered), len(within) - len(answered))


@dataclass(frozen=True)
class LeaseSeen:
    """The Lease as read once: its renewTime (epoch seconds), holder and leaseTransitions."""

    renew: float
    holder: str
    transitions: int


@dataclass(frozen=True)
class Renewals:
    """The leader's renewals in a window: how many, the longest time between two (or from the last one to the
    window's end, when renewals stopped), how many gaps were over twice the retry period (a renewal missed), and
    the times the holder changed."""

    renewals: int
    longest_gap_s: float | None
    missed: int
    transitions: int


def renewals(seen: Sequence[LeaseSeen], start: float, end: float, retry_period: float) -> Renewals:
    """From the Lease's reads in time order (some before `start`: the renewal before the window anchors its first
    gap); `start` and `end` in epoch seconds, as renewTime is."""
    times = sorted({s.renew for s in seen if s.renew <= end})
    before = [t for t in times if t < start]
    within = [t for t in times if t >= start]
    chain = before[-1:] + within
    gaps = [b - a for a, b in itertools.pairwise(chain)]
    if chain:
        gaps.append(end - chain[-1])  # still open at the end: renewals that stopped count
    last_before = [s for s in seen if s.renew < start][-1:]
    in_window = [s for s in seen if start <= s.renew <= end]
    changes = last_before + in_window
    transitions = sum(a.holder != b.holder or b.transitions > a.transitions
                      for a, b in itertools.pairwise(changes))
    return Renewals(len(within), round(max(gaps), 3) if gaps else None,
                    sum(g > 2 * retry_period for g in gaps), transitions)


@dataclass(frozen=True)
class Rss:
    before_mb: float
    peak_mb: float
    after_mb: float

    @property
    def growth_mb(self) -> float:
        return round(self.after_mb - self.before_mb, 1)


def rss(samples: Sequence[tuple[float, float]], start: float) -> Rss:
    """From (monotonic time, MB) samples in time order: the last before `start`, the highest from then on, the last
    of all."""
    if not samples:
        raise ValueError("no RSS sample")
    before = [mb for t, mb in samples if t <= start] or [samples[0][1]]
    during = [mb for t, mb in samples if t >= start] or [samples[-1][1]]
    return Rss(before[-1], max(during), samples[-1][1])


def first_status_ratio(attack: Sequence[float | None], quiet: Sequence[float]) -> float | None:
    """The slowest new job's first status under the attack over the slowest without it; None when one never got
    its status (infinitely worse) or nothing was measured."""
    if not attack or not quiet or any(a is None for a in attack) or max(quiet) <= 0:
        return None
    return round(max(a for a in attack if a is not None) / max(quiet), 2)


def targets_met(rss_: Rss, lag: Lag, lease: Renewals, ratio: float | None, operator_alive: bool) -> dict[str, bool]:
    """Each target of the issue, met or not; a leader that exited meets none it would have had to live for."""
    return {
        "rss_growth": rss_.growth_mb <= RSS_GROWTH_MB,
        "loop_lag": operator_alive and lag.unanswered == 0 and lag.worst_s is not None and lag.worst_s < LOOP_LAG_S,
        "no_renewal_missed": operator_alive and lease.missed == 0 and lease.transitions == 0,
        "first_status": operator_alive and ratio is not None and ratio <= FIRST_STATUS_RATIO,
    }
