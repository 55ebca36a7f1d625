"""kubectl mpijob's tables and ages, as kubectl prints them."""

from __future__ import annotations

import datetime as dt

import pytest

from mpiop.plugin.tables import age, human_duration, table


def test_table_columns_as_kubectl_pads_them() -> None:
    out = table(["Attempt", "State", "Logs"], [["0", "Restarted", "pi-attempt-0"], ["1", "Succeeded", ""]])
    assert out == ("ATTEMPT   STATE       LOGS\n"
                   "0         Restarted   pi-attempt-0\n"
                   "1         Succeeded   <none>\n")


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (-0.5, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (200, "3m20s"), (600, "10m"),
    (179 * 60, "179m"), (3 * 3600 + 5 * 60, "3h5m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (50 * 3600, "2d2h"),
    (8 * 86400, "8d"), (800 * 86400, "2y70d"), (3000 * 86400, "8y"),
])
def test_human_duration_is_kubectls(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_age_of_a_metav1_time() -> None:
    now = dt.datetime(2026, 11, 26, 15, 0, 0, tzinfo=dt.UTC)
    assert age("2026-11-26T14:58:30Z", now) == "90s"
    assert age(None, now) == "<none>"
