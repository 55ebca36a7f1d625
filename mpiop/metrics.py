"""Prometheus metrics: kubeflow/mpi-operator's names (for existing dashboards) plus mpiop's own."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# kubeflow/mpi-operator's metric names.
JOBS_CREATED = Counter("mpi_operator_jobs_created", "MPIJobs seen created")
JOBS_SUCCESSFUL = Counter("mpi_operator_jobs_successful", "MPIJobs that succeeded")
JOBS_FAILED = Counter("mpi_operator_jobs_failed", "MPIJobs that failed")
JOB_INFO = Gauge("mpi_operator_job_info", "Information about MPIJobs", ["launcher", "namespace"])
IS_LEADER = Gauge("mpi_operator_is_leader", "1 when this instance is the leader (or leader election is off)")

# mpiop's own.
JOBS_RESTARTED = Counter("mpiop_jobs_restarted", "Whole-job restarts after a failed pod")
RECONCILE_SECONDS = Histogram(
    "mpiop_reconcile_duration_seconds", "Time one reconcile of one MPIJob took", ["result"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
QUEUE_DEPTH = Gauge("mpiop_workqueue_depth", "Keys waiting in the work queue")
QUEUE_WAIT_SECONDS = Histogram(
    "mpiop_workqueue_wait_seconds", "Time a key waited in the queue before a worker took it",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
QUEUE_RETRIES = Counter("mpiop_workqueue_retries", "Keys put back with rate-limited backoff after an error")
API_REQUESTS = Counter("mpiop_api_requests", "Requests to the apiserver", ["verb", "resource", "code"])
API_LATENCY = Histogram(
    "mpiop_api_request_duration_seconds", "Apiserver request latency", ["verb", "resource"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WATCH_RESTARTS = Counter("mpiop_watch_restarts", "Watch streams re-opened", ["resource"])
JOBS_BY_PHASE = Gauge("mpiop_jobs", "MPIJobs by their current state", ["phase"])


def observe_request(verb: str, resource: str, code: int, seconds: float) -> None:
    API_REQUESTS.labels(verb, resource, str(code)).inc()
    API_LATENCY.labels(verb, resource).observe(seconds)


def observe_watch_restart(resource: str) -> None:
    WATCH_RESTARTS.labels(resource).inc()
