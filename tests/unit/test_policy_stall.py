"""mpiop.policies.stall: no progress within the job's progress deadline fails the attempt, reason Stalled."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import Metric, MPIJob, TrainerStatus
from mpiop.plan import Observed, Plan
from mpiop.policies import stall
from mpiop.policies.outcome import CONTINUE, STOP
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod

ANNOTATION = "mpiop.kubeflow.org/progress-deadline-seconds"
REPORT = TrainerStatus(progress_percentage=40, estimated_remaining_seconds=120,
                       metrics=[Metric(name="loss", value="0.3")], last_updated_time=at(150))


def running_job(deadline: str | None = "30", backoff: int = 1, restarts: int = 0, running_since: float = 100,
                report: TrainerStatus | None = None, running: bool = True) -> MPIJobBuilder:
    job = make_mpijob("pi", "ns").workers(2).backoff_limit(backoff).condition("Created")
    if deadline is not None:
        job = job.annotation(ANNOTATION, deadline)
    job = job.condition("Running", "True" if running else "False", when=at(running_since))
    return job.status(restart_count=restarts or None, ranks_running_time=at(running_since) if running else None,
                      attempt_start_time=at(90), trainer_status=report)


def pods(job: MPIJob, attempt: int = 0) -> Observed:
    return Observed(pods=[make_pod(job, "launcher", 0, attempt).running().on_node("n1").obj(),
                          make_pod(job, "worker", 0, attempt).running().on_node("n1").obj(),
                          make_pod(job, "worker", 1, attempt).running().on_node("n2").obj()])


def run(job: MPIJob, now: float) -> tuple[bool, Plan]:
    plan = Plan(status=job.status.model_copy(deep=True))
    return stall.apply(plan, job, pods(job, job.status.attempt), at(now)) is STOP, plan


@pytest.mark.parametrize(
    ("job", "now", "stalled", "requeue_after"),
    [
        (running_job(deadline=None), 10_000, False, None),
        (running_job(running=False), 10_000, False, None),
        (running_job(), 100, False, 30.0),
        (running_job(), 129.5, False, 0.5),
        (running_job(), 130, True, None),
        (running_job(report=REPORT), 170, False, 10.0),
        (running_job(report=REPORT), 180, True, None),
        # a report older than this attempt's ranks running (the previous attempt's) does not reset the clock
        (running_job(report=REPORT, running_since=200), 229, False, 1.0),
        (running_job(report=REPORT, running_since=200), 230, True, None),
    ],
    ids=["no-annotation", "not-running", "at-running", "just-before", "never-reported", "reported-recently",
         "silent-since-report", "old-report-before", "old-report-after"],
)
def test_stall(job: MPIJobBuilder, now: float, stalled: bool, requeue_after: float | None) -> None:
    handled, plan = run(job.obj(), now)
    assert handled is stalled
    assert plan.requeue_after == requeue_after
    assert (plan.status.last_failure is not None and plan.status.last_failure.reason) == (stalled and "Stalled")


@pytest.mark.parametrize(
    ("job", "now", "said"),
    [
        (running_job(), 145, "no progress for 45s (progress deadline 30s, annotation "
                             "mpiop.kubeflow.org/progress-deadline-seconds); it never reported progress (all ranks "
                             "running since 2024-05-01T12:01:40Z)"),
        (running_job(report=REPORT), 190, "no progress for 40s (progress deadline 30s, annotation "
                                          "mpiop.kubeflow.org/progress-deadline-seconds); it last reported at "
                                          "2024-05-01T12:02:30Z: 40% done, about 120s left, loss=0.3"),
    ],
    ids=["never", "last-report"],
)
def test_stall_restarts_saying_how_long_and_what_was_last_reported(job: MPIJobBuilder, now: float,
                                                                   said: str) -> None:
    _, plan = run(job.obj(), now)
    restarting = plan.status.condition("Restarting")
    assert restarting is not None and restarting.status == "True"
    assert restarting.message == (f"MPIJob ns/pi is restarting (restart 1 of backoffLimit 1): {said}; the attempt's "
                                  "logs are kept in ConfigMap pi-attempt-0")
    assert plan.status.restart_count == 1
    assert len(plan.pods_to_delete) == 3  # every pod of the stalled attempt goes
    assert (plan.status.ranks_running_time, plan.status.scheduled_time) == (None, None)  # the next attempt's ahead


def test_stall_past_backoff_limit_fails_the_job_stalled() -> None:
    _, plan = run(running_job(backoff=1, restarts=1).obj(), 131)
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "Stalled"
    assert failed.message is not None and "no progress for 31s" in failed.message
    assert plan.status.completion_time == at(131)


@pytest.mark.parametrize("value", ["", "0", "-5", "30s", "1.5", "abc", str(2**31)])
def test_bad_annotation_fails_naming_it(value: str) -> None:
    job = running_job(deadline=value).obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    assert stall.refuse_bad_annotation(plan, job, at(0)) is STOP
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message == (f"MPIJob ns/pi has failed: metadata.annotations[{ANNOTATION}]: {value!r} is not a "
                              f"whole number of seconds from 1 to {2**31 - 1}")


@pytest.mark.parametrize("value", [None, "1", "30", " 60 ", str(2**31 - 1)])
def test_good_annotation_is_accepted(value: str | None) -> None:
    job = running_job(deadline=value).obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    assert stall.refuse_bad_annotation(plan, job, at(0)) is CONTINUE
    assert not plan.status.finished


def test_a_bad_report_progress_annotation_fails_naming_it() -> None:
    job = running_job().annotation("mpiop.kubeflow.org/report-progress", "no").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    assert stall.refuse_bad_annotation(plan, job, at(0)) is STOP
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.message == ("MPIJob ns/pi has failed: "
                                                     "metadata.annotations[mpiop.kubeflow.org/report-progress]: "
                                                     "'no' is not \"true\" or \"false\"")
