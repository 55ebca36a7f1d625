"""mpiop.status.backoff: which failures count against backoffLimit, and when a job is past it, one row a case.

Every caller asks this one function: policies/failure (a failed pod, the limit passed in place),
policies/disruption (through failure.attempt_failed), status.in_place and status.failure_report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed
from mpiop.status import backoff
from mpiop.status.backoff import Ending
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod
from testkit.restarts import crash_looping, rerunning

FAILED, DISRUPTED, GOES_ON = Ending.FAILED, Ending.DISRUPTED, Ending.NONE


@dataclass(frozen=True)
class InPlace:
    """A pod of the job under restartPolicy OnFailure whose container failed `runs` times, restarted in place."""

    role: str
    runs: int
    index: int = 0
    attempt: int | None = None  # None: the job's current attempt
    terminating: bool = False


@dataclass(frozen=True)
class Row:
    limit: int
    restarts: int = 0  # status.restartCount: the current attempt
    disruptions: int = 0  # status.disruptionRestarts
    in_place: tuple[InPlace, ...] = field(default=())
    ending: Ending = GOES_ON


def observed_of(job: MPIJob, row: Row) -> Observed:
    pods = []
    for spec in row.in_place:
        attempt = row.restarts if spec.attempt is None else spec.attempt
        builder = make_pod(job, spec.role, spec.index, attempt).on_node("n1").running()
        if spec.terminating:
            builder = builder.terminating()
        obj = builder.obj()
        obj["spec"]["restartPolicy"] = "OnFailure"
        obj["status"] = (crash_looping if spec.index % 2 == 0 else rerunning)(spec.runs)
        pods.append(obj)
    return Observed(pods=pods)


ROWS = {
    # a failed pod (or launcher Job, stall, disruption past the cap) ends the attempt: one failure more
    "first failed pod": (Row(limit=6, ending=FAILED), 1, False),
    "failed pod, limit reached not passed": (Row(limit=6, restarts=5, ending=FAILED), 6, False),
    "failed pod past the limit": (Row(limit=6, restarts=6, ending=FAILED), 7, True),
    "backoffLimit 0: the first failure ends it": (Row(limit=0, ending=FAILED), 1, True),
    # disruptions: attempts they ended are not counted, nor is the one this pass ends
    "restarts after disruptions not counted": (Row(limit=6, restarts=8, disruptions=2, ending=FAILED), 7, True),
    "within the limit once disruptions are left out": (Row(limit=6, restarts=7, disruptions=2, ending=FAILED),
                                                        6, False),
    "a disruption ends the attempt: not counted": (Row(limit=6, restarts=6, ending=DISRUPTED), 6, False),
    "a disruption never fails the job": (Row(limit=0, restarts=3, in_place=(InPlace("launcher", 2),),
                                             ending=DISRUPTED), 5, False),
    # containers restarted in place (restartPolicy OnFailure): the launcher's and the workers', summed
    "launcher restarted in place within the limit": (Row(limit=6, in_place=(InPlace("launcher", 6),)), 6, False),
    "launcher restarted in place past the limit": (Row(limit=6, in_place=(InPlace("launcher", 7),)), 7, True),
    "workers restarted in place past the limit": (Row(limit=4, in_place=(InPlace("worker", 2, 0),
                                                                          InPlace("worker", 3, 1))), 5, True),
    "in place, added to the attempts that failed": (Row(limit=6, restarts=3, in_place=(InPlace("launcher", 4),)),
                                                     7, True),
    "in place, restarts after disruptions left out": (Row(limit=6, restarts=3, disruptions=1,
                                                          in_place=(InPlace("launcher", 4),)), 6, False),
    "in place, then a failed pod": (Row(limit=6, in_place=(InPlace("launcher", 6),), ending=FAILED), 7, True),
    "an earlier attempt's pod is not counted": (Row(limit=1, restarts=1,
                                                    in_place=(InPlace("worker", 5, 0, attempt=0),)), 1, False),
    "a pod being deleted is not counted": (Row(limit=1, in_place=(InPlace("worker", 5, 0, terminating=True),)),
                                           0, False),
    # only a new failure takes a job past: a backoffLimit lowered under a running job waits for one
    "lowered limit, no new failure": (Row(limit=2, restarts=4), 4, False),
    "lowered limit, then a container restarted in place": (Row(limit=2, restarts=4,
                                                               in_place=(InPlace("launcher", 1),)), 5, True),
}


@pytest.mark.parametrize(("row", "failures", "past"), ROWS.values(), ids=ROWS.keys())
def test_count(row: Row, failures: int, past: bool) -> None:
    job = (make_mpijob("pi", "ns").workers(2).backoff_limit(row.limit)
           .status(restart_count=row.restarts or None, disruption_restarts=row.disruptions or None).obj())
    count = backoff.count(job, observed_of(job, row), row.ending)
    counted_in_place = sum(p.runs for p in row.in_place
                           if not p.terminating and p.attempt in (None, row.restarts))
    assert (count.failures, count.past_limit) == (failures, past)
    assert (count.in_place, count.limit) == (counted_in_place, row.limit)
    assert count.disruptions == row.disruptions + (row.ending is DISRUPTED)
    assert str(count) == f"failure {failures} of backoffLimit {row.limit}"
