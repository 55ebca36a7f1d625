"""Prometheus metrics: kubeflow/mpi-operator's names (for existing dashboards) plus mpiop's own.

Per-job gauges (`mpi_operator_job_info`, `mpiop_jobs{phase}`) are computed from the informer cache at scrape
time rather than kept up to date on every event: they are always exact, cost nothing between scrapes, and a
deleted job's series disappears instead of lingering (kubeflow's job_info never forgets a launcher). Only
the leader reports them, so a dashboard summing over replicas does not count jobs twice.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.policies.graceful_stop import REASONS as GRACEFUL_STOP_REASONS
from mpiop.policies.graceful_stop import RESULTS as GRACEFUL_STOP_RESULTS
from mpiop.status.conditions import STALLED_REASON
from mpiop.status.failure_report import NO_SHELL, RANK_FAILED, WORKER_LOST

# kubeflow/mpi-operator's metric names.
JOBS_CREATED = Counter("mpi_operator_jobs_created", "MPIJobs seen created")
JOBS_SUCCESSFUL = Counter("mpi_operator_jobs_successful", "MPIJobs that succeeded")
JOBS_FAILED = Counter("mpi_operator_jobs_failed", "MPIJobs that failed")
IS_LEADER = Gauge("mpi_operator_is_leader", "1 when this instance is the leader (or leader election is off)")

# mpiop's own.
JOBS_RESTARTED = Counter("mpiop_jobs_restarted", "Whole-job restarts after a failed pod, by the failure's reason "
                         "(OOMKilled, Error, Evicted, WorkerLost, RankFailed, ...; Other past a known set)", ["reason"])
JOB_DURATION_SECONDS = Histogram(
    "mpiop_job_duration_seconds", "From startTime to completionTime of finished MPIJobs, by final state", ["state"],
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800),
)
JOB_SCHEDULING_DELAY_SECONDS = Histogram(
    "mpiop_job_scheduling_delay_seconds", "From an MPIJob's creation until all its pods first ran (Running)",
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400),
)
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
# client-go's two workqueue gauges for stuck workers (its help text): a worker stuck in one reconcile shows
# as a longest-running time that only grows, and unfinished work rising faster than 1 s/s.
QUEUE_LONGEST_RUNNING_SECONDS = Gauge(
    "mpiop_workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
)
QUEUE_UNFINISHED_WORK_SECONDS = Gauge(
    "mpiop_workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. "
    "Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at "
    "which this increases.",
)
API_REQUESTS = Counter("mpiop_api_requests", "Requests to the apiserver", ["verb", "resource", "code"])
API_LATENCY = Histogram(
    "mpiop_api_request_duration_seconds", "Apiserver request latency", ["verb", "resource"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
EVENTS = Counter("mpiop_events", "Events on MPIJobs by what became of them: created, updated (count bumped), "
                 "failed (not sent), dropped (too many waiting, or left at shutdown), unsent (--no-lifecycle-events)",
                 ["result"])
WATCH_RESTARTS = Counter("mpiop_watch_restarts", "Watch streams re-opened", ["resource"])
UNDECODABLE_OBJECTS = Counter("mpiop_undecodable_objects", "Objects (each version once) that could not be decoded "
                              "and were skipped", ["kind"])
STATUS_POSTS = Counter("mpiop_status_posts", "Progress posts to the status endpoint by answer: 202 accepted, else "
                       "the 4xx/5xx and why (no_token, unauthenticated, not_a_pod, other_job, not_its_pod, opted_out, "
                       "no_job, bad_path, bad_body, out_of_range, unprintable, too_large, request_timeout, "
                       "review_budget, review_queue, review_failed); code 0: a connection closed at a limit "
                       "(too_many_connections, too_many_source_connections, too_fast_source_connections); "
                       "content_encoding (415), body_bytes_in_flight (503)", ["code", "reason"])
GPU_LAYOUT_ADMISSIONS = Counter("mpiop_gpu_layout_admissions", "Total-GPU jobs the GPU layout webhook answered, by "
                                "result: laid_out, or stored as written: no_fit (the job waits), over_limit (its "
                                "Worker template is over --gpu-layout-max-entries), no_nodes (the node cache not "
                                "synced yet), unparsed; refused: source_budget (429, the address over "
                                "--gpu-layout-per-source-*), unauthenticated (403, no client certificate of "
                                "--gpu-layout-client-ca)", ["result"])
GRACEFUL_STOPS = Counter("mpiop_graceful_stops", "Graceful stops (the launcher told first, the workers deleted "
                         "after it) by why the attempt ended (Suspended, Disrupted, DeadlineExceeded) and how the "
                         "stop ended: launcher_ended, or grace_expired (the workers deleted at the deadline)",
                         ["reason", "result"])
GRACEFUL_STOP_SECONDS = Histogram(
    "mpiop_graceful_stop_duration_seconds", "From a graceful stop's start (the launcher deleted) until its workers "
    "were deleted, by why the attempt ended", ["reason"],
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600),
)
PHASES = ("Pending", "Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


class QueueStats(Protocol):
    """What the queue gauges read, at scrape time (controller.workqueue.WorkQueue)."""

    def __len__(self) -> int: ...
    def longest_running(self) -> float: ...
    def unfinished_work(self) -> float: ...


def observe_queue(queue: QueueStats) -> None:
    """The work queue's gauges read `queue` when scraped: its depth and client-go's stuck-worker gauges."""
    QUEUE_DEPTH.set_function(lambda: len(queue))
    QUEUE_LONGEST_RUNNING_SECONDS.set_function(queue.longest_running)
    QUEUE_UNFINISHED_WORK_SECONDS.set_function(queue.unfinished_work)


# The reasons a restart's label may name; any other is OTHER_REASON. A pod's status.reason feeds it, and a pod
# requesting a made-up extended resource fails OutOf<that resource>: one series each, without a bound.
RESTART_REASONS = frozenset({
    "OOMKilled", "Error", "StartError", "ContainerCannotRun", "DeadlineExceeded", "Completed",  # a container's
    "Evicted", "NodeLost", "NodeShutdown", "Shutdown", "Terminated", "UnexpectedAdmissionError", "NodeAffinity",
    "OutOfcpu", "OutOfmemory", "OutOfpods", "OutOfephemeral-storage", "OutOfnvidia.com/gpu",  # a pod's
    "EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC",
    "TerminationByKubelet", "DisruptionTarget",  # a DisruptionTarget condition's
    WORKER_LOST, RANK_FAILED, NO_SHELL, STALLED_REASON, "Failed", "Unknown",  # mpiop's
})
OTHER_REASON = "Other"


def restart_reason(reason: str) -> str:
    """The label of a restart's reason: itself if known, else OTHER_REASON (the condition message says which)."""
    return reason if reason in RESTART_REASONS else OTHER_REASON


def count_transitions(job: MPIJob, new: JobStatus, now: dt.datetime) -> None:
    """Counters and histograms that move when a status write lands (old: `job.status`)."""
    old = job.status
    if old.condition("Created") is None and new.condition("Created") is not None:
        JOBS_CREATED.inc()
    for state, counter in (("Succeeded", JOBS_SUCCESSFUL), ("Failed", JOBS_FAILED)):
        if not old.is_true(state) and new.is_true(state):  # type: ignore[arg-type]
            counter.inc()
            started = new.start_time or job.metadata.creation_timestamp
            if started is not None:
                seconds = ((new.completion_time or now) - started).total_seconds()
                JOB_DURATION_SECONDS.labels(state).observe(max(seconds, 0))
    if new.attempt > old.attempt:
        JOBS_RESTARTED.labels(restart_reason(new.last_failure.reason if new.last_failure else "Unknown")).inc()
    count_graceful_stop(old, new, now)
    if old.condition("Running") is None and new.is_true("Running") and job.metadata.creation_timestamp is not None:
        JOB_SCHEDULING_DELAY_SECONDS.observe(max((now - job.metadata.creation_timestamp).total_seconds(), 0))


def count_graceful_stop(old: JobStatus, new: JobStatus, now: dt.datetime) -> None:
    """A Stopping condition that turned False (policies/graceful_stop): one stop ended, and how long it took."""
    before, after = old.condition("Stopping"), new.condition("Stopping")
    if before is None or before.status != "True" or after is None or after.status == "True":
        return
    # One of policies.graceful_stop's reasons or "Other": whoever may patch mpijobs/status writes the condition.
    reason = before.reason if before.reason in GRACEFUL_STOP_REASONS else OTHER_REASON
    GRACEFUL_STOPS.labels(reason, GRACEFUL_STOP_RESULTS.get(after.reason or "", "other")).inc()
    if before.last_transition_time is not None:
        GRACEFUL_STOP_SECONDS.labels(reason).observe(max((now - before.last_transition_time).total_seconds(), 0))


def observe_request(verb: str, resource: str, code: int, seconds: float) -> None:
    count, latency = _request_series(verb, resource, code)
    count.inc()
    latency.observe(seconds)


@functools.lru_cache(maxsize=4096)
def _request_series(verb: str, resource: str, code: int) -> tuple[Counter, Histogram]:
    """The two series of a request's labels, looked up once: `labels()` hashes and locks on every call."""
    return API_REQUESTS.labels(verb, resource, str(code)), API_LATENCY.labels(verb, resource)


def observe_watch_restart(resource: str) -> None:
    WATCH_RESTARTS.labels(resource).inc()


def from_zero(metric: Counter | Histogram, *label_values: str) -> None:
    """Export these label values' series from 0. A labelled counter or histogram has no series until its
    first observation, and then Prometheus sees it appear already counted: `rate()` and `increase()` miss that
    first count (a job's only duration, the first failed reconcile), and a panel shows no data."""
    for value in label_values:
        metric.labels(value)


def watching(resources: Iterable[str]) -> None:
    from_zero(WATCH_RESTARTS, *resources)


from_zero(JOB_DURATION_SECONDS, "Succeeded", "Failed")
from_zero(RECONCILE_SECONDS, "ok", "error")
# The reasons most restarts carry: the kubelet's for a container (OOMKilled, Error) or a pod (Evicted), and
# mpirun's for a lost worker or rank. Others appear at their first restart.
for _reason in GRACEFUL_STOP_REASONS:
    from_zero(GRACEFUL_STOP_SECONDS, _reason)
    for _result in GRACEFUL_STOP_RESULTS.values():
        GRACEFUL_STOPS.labels(_reason, _result)
from_zero(JOBS_RESTARTED, "OOMKilled", "Error", "Evicted", WORKER_LOST, RANK_FAILED, OTHER_REASON)


def job_phase(job: Mapping[str, Any]) -> str:
    """The one state a job is in, from its conditions (finished first, then suspended, then progress)."""
    true = {c.get("type") for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    for phase in ("Succeeded", "Failed", "Suspended", "Restarting", "Running", "Created"):
        if phase in true:
            return phase
    return "Pending"


@dataclass
class MPIJobSource:
    """Where the per-job gauges come from: the jobs cache, whether a job (namespace, name) has a launcher pod,
    and whether to report at all."""

    mpijobs: Callable[[], Iterable[Mapping[str, Any]]]
    has_launcher: Callable[[str, str], bool]
    active: Callable[[], bool] = lambda: True


class MPIJobCollector(Collector):
    """`mpi_operator_job_info{launcher,namespace}`, `mpiop_jobs{phase}` and each reporting job's progress
    (`mpiop_mpijob_progress_ratio`, `mpiop_mpijob_estimated_remaining_seconds`), computed on scrape."""

    def __init__(self) -> None:
        self.source: MPIJobSource | None = None

    def describe(self) -> Iterable[Metric]:
        return [self._info(), self._phases(), *self._progress()]

    @staticmethod
    def _progress() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily("mpiop_mpijob_progress_ratio", "How complete a job is, 0 to 1, as it last "
                                  "reported (status.trainerStatus.progressPercentage / 100)",
                                  labels=["namespace", "name"]),
                GaugeMetricFamily("mpiop_mpijob_estimated_remaining_seconds", "The training time a job last "
                                  "estimated it has left (status.trainerStatus.estimatedRemainingSeconds)",
                                  labels=["namespace", "name"]))

    @staticmethod
    def _info() -> GaugeMetricFamily:
        return GaugeMetricFamily("mpi_operator_job_info", "Information about MPIJobs", labels=["launcher", "namespace"])

    @staticmethod
    def _phases() -> GaugeMetricFamily:
        return GaugeMetricFamily("mpiop_jobs", "MPIJobs by their current state", labels=["phase"])

    def collect(self) -> Iterator[Metric]:
        info, phases = self._info(), self._phases()
        ratio, remaining = self._progress()
        source = self.source
        if source is not None and source.active():
            counts = dict.fromkeys(PHASES, 0)
            for job in list(source.mpijobs()):
                counts[job_phase(job)] += 1
                meta = job.get("metadata") or {}
                launcher = f"{meta.get('name')}-launcher"
                if source.has_launcher(str(meta.get("namespace")), str(meta.get("name"))):
                    info.add_metric([launcher, str(meta.get("namespace"))], 1)
                report = (job.get("status") or {}).get("trainerStatus") or {}
                labels = [str(meta.get("namespace")), str(meta.get("name"))]
                if report.get("progressPercentage") is not None:
                    ratio.add_metric(labels, float(report["progressPercentage"]) / 100)
                if report.get("estimatedRemainingSeconds") is not None:
                    remaining.add_metric(labels, float(report["estimatedRemainingSeconds"]))
            for phase, count in counts.items():
                phases.add_metric([phase], count)
        yield info
        yield phases
        yield ratio
        yield remaining


MPIJOB_GAUGES = MPIJobCollector()
REGISTRY.register(MPIJOB_GAUGES)


def labelled() -> dict[str, tuple[str, ...]]:
    """Every metric of this module with labels, by name, with its label names: what docs/security.md's inventory must
    list (a label's value may be someone else's). prometheus_client keeps label names only in private attributes, so
    they are read here, once, beside the metrics."""
    found: dict[str, tuple[str, ...]] = {}
    for value in globals().values():
        if isinstance(value, Counter | Gauge | Histogram) and value._labelnames:
            found[value._name] = tuple(value._labelnames)
    for family in MPIJOB_GAUGES.describe():
        if labels := tuple(getattr(family, "_labelnames", ())):
            found[family.name] = labels
    return found
