"""The hostile bench's arithmetic (loop lag, Lease renewals, RSS, first-status ratio, targets), its flood's header
sizes and budget, and its premise: the hostile job never fits, so every node change lays it out again."""

from __future__ import annotations

import orjson
import pytest

from bench.hostile_figures import (
    Lag,
    LeaseSeen,
    Probe,
    Renewals,
    Rss,
    first_status_ratio,
    loop_lag,
    renewals,
    rss,
    targets_met,
)
from bench.hostile_flood import FIELD, MAX_LINES, Tally, header_bytes, padding
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.policies import gpu_layout
from mpiop.serving import layout_webhook
from testkit.hostile_layout import admission_review, hostile_job, tainted_gpu_nodes, tolerations
from testkit.nodes import gpu_nodes

PROBES = [Probe(0.0, 0.01, 200), Probe(1.0, 2.5, 200), Probe(2.0, None), Probe(3.0, 0.02, 500), Probe(9.0, 7.0, 200)]


@pytest.mark.parametrize(("start", "end", "expected"), [
    (0.0, 5.0, Lag(probes=4, worst_s=2.5, p99_s=2.5, over_target=1, unanswered=1)),  # the one at 9.0 is outside
    (0.0, 10.0, Lag(probes=5, worst_s=7.0, p99_s=7.0, over_target=2, unanswered=1)),
    (3.0, 4.0, Lag(probes=1, worst_s=0.02, p99_s=0.02, over_target=0, unanswered=0)),  # a 500 is still an answer
    (2.0, 3.0, Lag(probes=1, worst_s=None, p99_s=None, over_target=0, unanswered=1)),
    (20.0, 30.0, Lag(probes=0, worst_s=None, p99_s=None, over_target=0, unanswered=0)),
])
def test_loop_lag_is_the_slowest_answer_of_the_probes_sent_in_the_window(start: float, end: float,
                                                                         expected: Lag) -> None:
    assert loop_lag(PROBES, start, end) == expected


def test_loop_lag_p99_is_nearest_rank() -> None:
    probes = [Probe(float(i), 0.01 * (i + 1)) for i in range(200)]
    assert loop_lag(probes, 0.0, 200.0).p99_s == pytest.approx(1.98)


def seen(*renews: float, holder: str = "a", transitions: int = 0) -> list[LeaseSeen]:
    return [LeaseSeen(r, holder, transitions) for r in renews]


@pytest.mark.parametrize(("observed", "start", "end", "expected"), [
    # Every 2 s, the first gap anchored on the renewal before the window, the last open until its end.
    (seen(98.0, 100.1, 102.2, 104.3, 106.4), 100.0, 107.0, Renewals(4, 2.1, 0, 0)),
    # A 4.5 s stall between two renewals: one gap over 2 x 2 s.
    (seen(98.0, 100.0, 104.5, 106.5), 99.0, 107.0, Renewals(3, 4.5, 1, 0)),
    # Renewals stopped (the leader stalled or exited): the open gap to the window's end counts.
    (seen(98.0, 100.0, 102.0), 99.0, 110.0, Renewals(2, 8.0, 1, 0)),
    # Renewals after the window are not in it.
    (seen(100.0, 102.0, 120.0), 99.0, 103.0, Renewals(2, 2.0, 0, 0)),
    # Nothing seen at all.
    ([], 0.0, 10.0, Renewals(0, None, 0, 0)),
])
def test_renewal_gaps_over_twice_the_retry_period_are_missed_renewals(observed: list[LeaseSeen], start: float,
                                                                      end: float, expected: Renewals) -> None:
    assert renewals(observed, start, end, retry_period=2.0) == expected


def test_a_new_holder_or_a_transition_in_the_window_is_counted_and_one_before_it_is_not() -> None:
    observed = [LeaseSeen(90.0, "a", 0), LeaseSeen(95.0, "b", 1), LeaseSeen(100.5, "b", 1),
                LeaseSeen(102.5, "c", 2), LeaseSeen(104.5, "c", 2)]
    assert renewals(observed, 100.0, 105.0, 2.0).transitions == 1  # b -> c; a -> b was before the window
    assert renewals(observed, 80.0, 105.0, 2.0).transitions == 2


def test_rss_before_is_the_last_sample_before_the_attack_and_the_peak_the_highest_from_then_on() -> None:
    samples = [(0.0, 100.0), (1.0, 500.0), (1.2, 101.0), (2.0, 400.0), (3.0, 150.0)]
    assert rss(samples, 1.5) == Rss(101.0, 400.0, 150.0)  # the 500 before the attack is not its peak
    assert rss(samples, 1.5).growth_mb == 49.0
    assert rss(samples, -1.0).before_mb == 100.0  # no sample before: the first
    with pytest.raises(ValueError, match="no RSS sample"):
        rss([], 0.0)


@pytest.mark.parametrize(("attack", "quiet", "expected"), [
    ([0.05, 0.08], [0.04, 0.05], 1.6),
    ([0.05, None], [0.04, 0.05], None),  # one never got its status
    ([], [0.04], None),
    ([0.1], [], None),
])
def test_first_status_ratio_is_slowest_over_slowest(attack: list[float | None], quiet: list[float],
                                                    expected: float | None) -> None:
    assert first_status_ratio(attack, quiet) == expected


def test_targets_are_the_issues_and_a_leader_that_exited_misses_those_it_had_to_live_for() -> None:
    fine = (Rss(100.0, 130.0, 119.0), Lag(200, 0.3, 0.1, 0, 0), Renewals(10, 2.2, 0, 0), 1.5)
    assert targets_met(*fine, operator_alive=True) == {"rss_growth": True, "loop_lag": True,
                                                       "no_renewal_missed": True, "first_status": True}
    assert targets_met(*fine, operator_alive=False) == {"rss_growth": True, "loop_lag": False,
                                                        "no_renewal_missed": False, "first_status": False}
    bad = (Rss(100.0, 900.0, 121.0), Lag(200, 1.0, 0.9, 1, 0), Renewals(10, 4.1, 1, 0), 2.01)
    assert targets_met(*bad, operator_alive=True) == {"rss_growth": False, "loop_lag": False,
                                                      "no_renewal_missed": False, "first_status": False}
    assert not targets_met(Rss(1, 1, 1), Lag(5, 0.1, 0.1, 0, 1), Renewals(1, 2, 0, 1), 1.0, True)["loop_lag"]


@pytest.mark.parametrize(("header_kb", "token", "lines"), [(480.0, FIELD, 60), (480.0, 1024, 61), (0.0, 1024, 0),
                                                            (10_000.0, 1024, MAX_LINES)])
def test_flood_padding_makes_the_asked_size_in_lines_aiohttp_accepts(header_kb: float, token: int, lines: int) -> None:
    pad = padding(header_kb, token)
    assert len(pad) == lines
    assert all(len(v) == FIELD <= 8190 for v in pad.values())
    if lines and lines < MAX_LINES:
        assert abs(header_bytes(pad) + token - header_kb * 1024) < FIELD


def test_flood_budget_refuses_the_request_that_would_pass_it() -> None:
    tally = Tally(budget=1000)
    assert tally.spend(600) and tally.stopped_by == "time"
    assert not tally.spend(500)
    assert (tally.sent_bytes, tally.stopped_by) == (600, "budget")


def test_the_hostile_job_fits_no_node_so_it_stays_to_be_laid_out() -> None:
    """The premise of the tenant attack: the job is never laid out, so every node event lays it out again; the
    webhook answers it with a warning and no patch, and over the layout's entry limit it is not matched at all."""
    job = hostile_job("hostile", "tenant", 50)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["tolerations"] == tolerations(50) and len(worker["tolerations"]) == 50
    assert worker["tolerations"][-1] == {"key": "nvidia.com/gpu", "operator": "Exists"}
    nodes = tainted_gpu_nodes("t", 3) + gpu_nodes("free", 2, 8)
    parsed = MPIJob.model_validate(job)
    assert gpu_layout.needs_layout(parsed)
    limit = DEFAULT_SETTINGS.gpu_layout_max_entries
    chosen = gpu_layout.choose(parsed, nodes, limit)
    assert isinstance(chosen, str) and "13" in chosen and "taint not tolerated" in chosen
    over = gpu_layout.choose(parsed, nodes, 49)
    assert isinstance(over, str) and "tolerations: 50 entries" in over, over
    answer = layout_webhook.review(admission_review(job), nodes, limit).admission["response"]
    assert answer["allowed"] and "patch" not in answer and answer["warnings"]
    assert admission_review(job)["request"]["namespace"] == "tenant"
    assert orjson.loads(orjson.dumps(admission_review(job)))["request"]["object"] == job
