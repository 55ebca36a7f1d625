"""testkit.metrics: what the tests and the bench read off the operator's /metrics, and the difference of two
scrapes (counts subtracted, levels kept)."""

from __future__ import annotations

from testkit.metrics import Metrics


def scrape(pods_restarts: int, creates: int) -> str:
    return f"""# HELP mpiop_api_requests_total API requests
# TYPE mpiop_api_requests_total counter
mpiop_api_requests_total{{verb="POST",resource="pods",code="201"}} {creates}.0
mpiop_api_requests_total{{verb="GET",resource="pods",code="200"}} 3.0
mpiop_api_requests_total{{verb="PUT",resource="leases",code="200"}} {creates}.0
# HELP mpiop_reconcile_duration_seconds Reconciles
# TYPE mpiop_reconcile_duration_seconds histogram
mpiop_reconcile_duration_seconds_count{{result="ok"}} {creates * 2}.0
# HELP mpiop_watch_restarts Watch streams re-opened
# TYPE mpiop_watch_restarts counter
mpiop_watch_restarts_total{{resource="pods"}} {pods_restarts}.0
mpiop_watch_restarts_total{{resource="mpijobs"}} 1.0
# HELP mpiop_workqueue_depth Keys waiting
# TYPE mpiop_workqueue_depth gauge
mpiop_workqueue_depth {pods_restarts}.0
"""


def test_two_scrapes_differ_by_requests_reconciles_and_watch_restarts() -> None:
    before, after = Metrics.parse(scrape(2, 10)), Metrics.parse(scrape(5, 18))
    spent = after - before
    assert spent.by_verb() == {"POST pods": 8, "PUT leases": 8}
    assert (spent.total(), spent.writes(), spent.reconciles) == (16, 8, 16.0)  # lease renewals not writes
    assert spent.writes(except_resource="") == 16
    assert spent.queue_depth == after.queue_depth == 5  # a level, not a count
    assert dict(spent.watch_restarts) == {"pods": 3}  # mpijobs' did not change: left out
    assert after.watch_restarts == {"pods": 5, "mpijobs": 1}


def test_a_value_sums_the_samples_whose_labels_include_the_asked() -> None:
    metrics = Metrics.parse(scrape(2, 10))
    assert metrics.value("mpiop_api_requests_total", resource="pods") == 13
    assert metrics.value("mpiop_api_requests_total", verb="POST", resource="pods", code="201") == 10
    assert metrics.value("mpiop_api_requests_total", verb="DELETE") == 0
    assert metrics.requests[("GET", "pods", "200")] == 3
