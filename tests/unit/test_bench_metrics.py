"""bench.operator.parse_metrics: what the bench reads off the operator's /metrics, and the difference of two scrapes."""

from __future__ import annotations

from bench.operator import parse_metrics


def scrape(pods_restarts: int, creates: int) -> str:
    return f"""# HELP mpiop_api_requests_total API requests
# TYPE mpiop_api_requests_total counter
mpiop_api_requests_total{{verb="POST",resource="pods",code="201"}} {creates}.0
mpiop_api_requests_total{{verb="GET",resource="pods",code="200"}} 3.0
# HELP mpiop_reconcile_duration_seconds Reconciles
# TYPE mpiop_reconcile_duration_seconds histogram
mpiop_reconcile_duration_seconds_count{{result="ok"}} {creates * 2}.0
# HELP mpiop_watch_restarts Watch streams re-opened
# TYPE mpiop_watch_restarts counter
mpiop_watch_restarts_total{{resource="pods"}} {pods_restarts}.0
mpiop_watch_restarts_total{{resource="mpijobs"}} 1.0
"""


def test_two_scrapes_differ_by_requests_reconciles_and_watch_restarts() -> None:
    before, after = parse_metrics(scrape(2, 10)), parse_metrics(scrape(5, 18))
    spent = after - before
    assert spent.by_verb() == {"POST pods": 8}
    assert (spent.total(), spent.writes(), spent.reconciles) == (8, 8, 16.0)
    assert dict(spent.watch_restarts) == {"pods": 3}  # mpijobs' did not change: left out
    assert after.watch_restarts == {"pods": 5, "mpijobs": 1}
