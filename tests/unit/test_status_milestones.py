"""mpiop.status.milestones: the current attempt's scheduled, ranks-running and first-progress times."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import JobStatus, TrainerStatus
from mpiop.plan import Observed, Plan
from mpiop.status import milestones
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod

JOB = make_mpijob("pi", "ns").workers(2).obj()


def launcher() -> PodBuilder:
    return make_pod(JOB, "launcher")


def worker(i: int) -> PodBuilder:
    return make_pod(JOB, "worker", i)


SCHEDULED = [launcher().pending().on_node("n1"), worker(0).pending().on_node("n1"), worker(1).pending().on_node("n2")]
RUNNING = [launcher().running().on_node("n1"), worker(0).running().on_node("n1"), worker(1).running().on_node("n2")]


def job(running: bool = False, **status: Any) -> MPIJobBuilder:
    built = make_mpijob("pi", "ns").workers(2).status(attempt_start_time=at(0), **status)
    return built.condition("Running", when=at(5)) if running else built


@pytest.mark.parametrize(
    ("builder", "pods", "expected"),
    [
        (job(), [launcher().pending(), worker(0).pending().on_node("n1"), worker(1).pending().on_node("n2")],
         (None, None, None)),
        (job(), SCHEDULED[1:], (None, None, None)),  # no launcher yet
        (job(), SCHEDULED, (at(10), None, None)),
        (job(running=True), RUNNING, (at(10), at(10), None)),
        (job(running=True, scheduled_time=at(3), ranks_running_time=at(5)), RUNNING, (at(3), at(5), None)),
        (job(running=True, scheduled_time=at(3), ranks_running_time=at(5),
             trainer_status=TrainerStatus(progress_percentage=1, last_updated_time=at(8))), RUNNING,
         (at(3), at(5), at(10))),
        # the previous attempt's report is not this attempt's first progress
        (job(running=True, scheduled_time=at(3), ranks_running_time=at(5),
             trainer_status=TrainerStatus(progress_percentage=1, last_updated_time=at(-50))), RUNNING,
         (at(3), at(5), None)),
        (job(running=True, scheduled_time=at(3), ranks_running_time=at(5), first_progress_time=at(7),
             trainer_status=TrainerStatus(progress_percentage=9, last_updated_time=at(9))), RUNNING,
         (at(3), at(5), at(7))),
    ],
    ids=["unscheduled-launcher", "no-launcher", "all-scheduled", "all-running", "kept", "first-report",
         "old-report", "first-kept"],
)
def test_milestones(builder: MPIJobBuilder, pods: list[PodBuilder],
                    expected: tuple[object, object, object]) -> None:
    obj = builder.obj()
    plan = Plan(status=obj.status.model_copy(deep=True))
    milestones.apply(plan, obj, Observed(pods=[p.obj() for p in pods]), at(10))
    status = plan.status
    assert (status.scheduled_time, status.ranks_running_time, status.first_progress_time) == expected


def test_a_new_attempt_clears_them() -> None:
    status = JobStatus(scheduled_time=at(1), ranks_running_time=at(2), first_progress_time=at(3))
    milestones.new_attempt(status)
    assert (status.scheduled_time, status.ranks_running_time, status.first_progress_time) == (None, None, None)
