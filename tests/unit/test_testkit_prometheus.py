"""testkit.prometheus: the times Prometheus's API writes (Go's RFC 3339, up to nanoseconds), which
test_prometheus compares with this machine's clock to know that the rules were evaluated after a moment."""

from __future__ import annotations

import pytest

from testkit.prometheus import epoch_seconds

NOON = 1714564800.0  # 2024-05-01T12:00:00Z


@pytest.mark.parametrize(("stamp", "seconds"), [
    ("2024-05-01T12:00:00Z", NOON),
    ("2024-05-01T12:00:00.123456789Z", NOON + 0.123456789),
    ("2024-05-01T14:00:00.5+02:00", NOON + 0.5),
    ("2024-05-01T07:30:00-04:30", NOON),
    ("0001-01-01T00:00:00Z", -62135596800.0),  # a rule not evaluated yet
], ids=["utc", "nanoseconds", "offset", "negative-offset", "never"])
def test_epoch_seconds(stamp: str, seconds: float) -> None:
    assert epoch_seconds(stamp) == pytest.approx(seconds, abs=1e-6)


def test_what_is_not_a_time_is_refused() -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        epoch_seconds("yesterday")
