"""mpiop.controller.soft_writes.SoftWriteHold: soft writes wait for a transition, at most `delay` seconds."""

from __future__ import annotations

import pytest

from mpiop.controller.soft_writes import SoftWriteHold

# (seconds, all soft?) passes of one job, and what each is told: seconds to wait, or None (write now).
CASES = {
    "a transition is written at once": [(0, False, None)],
    "soft writes wait out the delay from the first": [(0, True, 5.0), (2, True, 3.0), (5, True, None)],
    "after a write the next soft one waits afresh": [(0, True, 5.0), (6, True, None), (7, True, 5.0)],
    "a transition takes the waiting ones along and resets": [(0, True, 5.0), (1, False, None), (2, True, 5.0)],
}


@pytest.mark.parametrize("passes", CASES.values(), ids=CASES.keys())
def test_hold(passes: list[tuple[float, bool, float | None]]) -> None:
    hold = SoftWriteHold(delay=5.0)
    assert [hold.wait("ns/pi", soft, now) for now, soft, _ in passes] == [told for _, _, told in passes]


def test_jobs_wait_apart_and_a_deleted_job_is_forgotten() -> None:
    hold = SoftWriteHold(delay=5.0)
    assert hold.wait("ns/a", True, 0) == 5.0
    assert hold.wait("ns/b", True, 3) == 5.0
    hold.forget("ns/a")
    assert hold.wait("ns/a", True, 4) == 5.0


def test_held_counts_the_jobs_waiting_until_they_write() -> None:
    hold = SoftWriteHold(delay=5.0)
    assert hold.held() == 0
    hold.wait("ns/a", True, 0)
    hold.wait("ns/b", True, 1)
    assert hold.held() == 2
    hold.wait("ns/a", True, 5)  # waited long enough: written
    hold.wait("ns/b", False, 2)  # a transition took it along
    assert hold.held() == 0
