"""The policy contract: Outcome has no truth value, so a bool-style `if policy.apply(...)` fails loudly."""

from __future__ import annotations

import pytest

from mpiop.policies.outcome import CONTINUE, STOP, Outcome


@pytest.mark.parametrize("outcome", list(Outcome))
def test_an_outcome_has_no_truth_value(outcome: Outcome) -> None:
    with pytest.raises(TypeError, match=r"Outcome\.STOP or Outcome\.CONTINUE"):
        bool(outcome)


def test_the_two_named_values() -> None:
    assert (CONTINUE, STOP) == (Outcome.CONTINUE, Outcome.STOP)
    assert CONTINUE is not STOP
