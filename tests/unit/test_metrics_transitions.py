"""mpiop.metrics.count_transitions: what moves when a status write lands."""

from __future__ import annotations

from prometheus_client import REGISTRY

from mpiop import metrics
from mpiop.api.v2beta1 import FailureInfo
from testkit.mpijobs import at, make_mpijob


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_success_observes_the_duration_from_start_time() -> None:
    job = make_mpijob("pi").condition("Created").condition("Running").status(start_time=at(0)).obj()
    new = job.status.model_copy(deep=True)
    new.conditions.append(new.conditions[-1].model_copy(update={"type": "Succeeded"}))
    new.completion_time = at(90)
    before = (value("mpiop_job_duration_seconds_count", state="Succeeded"),
              value("mpiop_job_duration_seconds_sum", state="Succeeded"), value("mpi_operator_jobs_successful_total"))
    metrics.count_transitions(job, new, at(95))
    assert value("mpiop_job_duration_seconds_count", state="Succeeded") == before[0] + 1
    assert value("mpiop_job_duration_seconds_sum", state="Succeeded") == before[1] + 90
    assert value("mpi_operator_jobs_successful_total") == before[2] + 1
    metrics.count_transitions(job.model_copy(update={"status": new}), new, at(96))  # no transition: nothing moves
    assert value("mpiop_job_duration_seconds_count", state="Succeeded") == before[0] + 1


def test_restart_counts_its_reason_and_first_running_the_scheduling_delay() -> None:
    job = make_mpijob("pi").condition("Created").obj()
    job.metadata.creation_timestamp = at(0)
    new = job.status.model_copy(deep=True)
    new.conditions.append(new.conditions[-1].model_copy(update={"type": "Running"}))
    before = value("mpiop_job_scheduling_delay_seconds_sum")
    metrics.count_transitions(job, new, at(42))
    assert value("mpiop_job_scheduling_delay_seconds_sum") == before + 42

    restarted = new.model_copy(update={"restart_count": 1, "last_failure": FailureInfo(reason="OOMKilled")})
    oom = value("mpiop_jobs_restarted_total", reason="OOMKilled")
    metrics.count_transitions(job.model_copy(update={"status": new}), restarted, at(50))
    assert value("mpiop_jobs_restarted_total", reason="OOMKilled") == oom + 1


def test_label_values_known_in_advance_are_exported_from_zero() -> None:
    """So Prometheus sees them at 0 before their first count (else rate() and increase() miss that count)."""
    for name, labels in (("mpiop_job_duration_seconds_count", {"state": "Failed"}),
                         ("mpiop_job_duration_seconds_count", {"state": "Succeeded"}),
                         ("mpiop_reconcile_duration_seconds_count", {"result": "error"}),
                         ("mpiop_reconcile_duration_seconds_count", {"result": "ok"}),
                         ("mpiop_jobs_restarted_total", {"reason": "OOMKilled"}),
                         ("mpiop_jobs_restarted_total", {"reason": "WorkerLost"})):
        assert REGISTRY.get_sample_value(name, labels) is not None, (name, labels)
    assert REGISTRY.get_sample_value("mpiop_watch_restarts_total", {"resource": "poddisruptionbudgets"}) is None
    metrics.watching(["poddisruptionbudgets"])
    assert REGISTRY.get_sample_value("mpiop_watch_restarts_total", {"resource": "poddisruptionbudgets"}) == 0


def test_a_restarts_reason_label_is_one_of_a_known_set_or_other() -> None:
    """A pod's status.reason feeds lastFailure.reason, and a pod requesting a made-up extended resource fails
    OutOf<that resource>: 100 such restarts are 100 counts of one series, not 100 series."""
    job = make_mpijob("pi").condition("Created").condition("Running").obj()

    def series() -> int:
        return sum(1 for family in REGISTRY.collect() if family.name == "mpiop_jobs_restarted"
                   for sample in family.samples if sample.name == "mpiop_jobs_restarted_total")

    before, other = series(), value("mpiop_jobs_restarted_total", reason="Other")
    for n in range(100):
        restarted = job.status.model_copy(update={"restart_count": 1,
                                                  "last_failure": FailureInfo(reason=f"OutOfexample.com/r{n}")})
        metrics.count_transitions(job, restarted, at(n))
    assert value("mpiop_jobs_restarted_total", reason="Other") == other + 100
    assert series() == before
    assert metrics.restart_reason("OOMKilled") == "OOMKilled" and metrics.restart_reason("Evicted\x1b") == "Other"
