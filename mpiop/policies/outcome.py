"""The one contract of a policy: `apply(...) -> Outcome`, what decide() does next.

Every policy's `apply` returns one of these two named values, never a bool or None, so a reader of
decide.py knows what a call means without opening the policy (jobset's controllers name their results
the same way). An Outcome has no truth value: `if policy.apply(...)` raises, so a policy that drifts back
to a bool contract fails its tests instead of reading as "stop".
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    CONTINUE = "continue"
    """The policy did its part, or had nothing to do: decide() goes on to the next step."""
    STOP = "stop"
    """The policy decided this pass (the job failed, succeeded, restarts or is suspended): decide() skips the
    steps after it (the finishing steps, evidence, node exclusion, gang, clean-up, still run)."""

    def __bool__(self) -> bool:
        raise TypeError("compare an Outcome with Outcome.STOP or Outcome.CONTINUE, it has no truth value")


CONTINUE = Outcome.CONTINUE
STOP = Outcome.STOP
