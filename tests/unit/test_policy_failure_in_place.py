"""mpiop.policies.failure under restartPolicy OnFailure: containers restarted in place count against backoffLimit.

The kubelet's view of a container whose n-th run failed moves through three states (`crashed`, `crash_looping`,
`rerunning`: testkit/restarts.py); each counts n failures, so a failure counts once however many reconciles see it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies import failure
from mpiop.policies.outcome import STOP
from mpiop.status import failure_report
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod
from testkit.restarts import crash_looping, crashed, healed, rerunning

Status = Callable[[int], dict[str, Any]]


def on_failure_job(limit: int, attempt: int = 0) -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(2).restart_policy("Launcher", "OnFailure")
            .restart_policy("Worker", "OnFailure").backoff_limit(limit).status(restart_count=attempt or None)
            .condition("Created").condition("Running", when=at(50)))


def pods(job: MPIJob, restarted: str, status: dict[str, Any], attempt: int = 0) -> list[dict[str, Any]]:
    """The attempt's pods, all running under OnFailure, `restarted` (a pod name) in `status`."""
    found = []
    for role, index in (("launcher", 0), ("worker", 0), ("worker", 1)):
        obj = make_pod(job, role, index, attempt).on_node("n1").running().obj()
        obj["spec"]["restartPolicy"] = "OnFailure"
        if obj["metadata"]["name"] == restarted:
            obj["status"] = status
        found.append(obj)
    return found


def run(job: MPIJob, observed: Observed) -> tuple[bool, Plan]:
    plan = Plan(status=job.status.model_copy(deep=True))
    return failure.apply(plan, job, observed, at(100)) is STOP, plan


LAUNCHER, WORKER = "pi-launcher", "pi-worker-1"


@pytest.mark.parametrize(
    ("pod", "limit", "failures", "fails"),
    [
        (LAUNCHER, 0, 1, True),
        (LAUNCHER, 1, 1, False),
        (LAUNCHER, 1, 2, True),
        (LAUNCHER, 6, 6, False),
        (LAUNCHER, 6, 7, True),
        (WORKER, 0, 1, True),
        (WORKER, 1, 1, False),
        (WORKER, 1, 2, True),
        (WORKER, 6, 6, False),
        (WORKER, 6, 7, True),
    ],
)
@pytest.mark.parametrize("kubelet", [crashed, crash_looping, rerunning])
def test_in_place_failures_against_backoff_limit(pod: str, limit: int, failures: int, fails: bool,
                                                  kubelet: Status) -> None:
    job = on_failure_job(limit).obj()
    handled, plan = run(job, Observed(pods=pods(job, pod, kubelet(failures))))
    assert handled is fails
    assert plan.pods_to_delete == [], "a restart in place restarts nothing else"
    assert plan.status.restart_count is None
    summary = f"{pod}{' (rank 1, node n1)' if pod == WORKER else ' (node n1)'} container main Error exit 1"
    if fails:
        assert plan.status.finished
        condition = plan.status.condition("Failed")
        assert condition is not None and condition.reason == "BackoffLimitExceeded"
        assert condition.message == (f"MPIJob ns/pi has failed (backoffLimit {limit} exceeded: {failures} failures "
                                     f"after 0 restarts, {failures} of them restarted in place): {summary}; the "
                                     "attempt's logs are kept in ConfigMap pi-attempt-0")
        assert [(e.type, e.reason) for e in plan.events] == [("Warning", "BackoffLimitExceeded")]
        assert plan.status.last_failure is not None
        assert (plan.status.last_failure.pod, plan.status.last_failure.exit_code) == (pod, 1)
        return
    runs = "1 failed run" if failures == 1 else f"{failures} failed runs"
    note = (f"{pod} container main Error exit 1 ({runs}, restarted in place); "
            f"failure {failures} of backoffLimit {limit}")
    running = plan.status.condition("Running")
    assert running is not None
    assert (running.status, running.message) == ("True", f"MPIJob ns/pi is running; {note}")
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", "ContainerRestarted", f"MPIJob ns/pi: {note}")]

    again = job.model_copy(update={"status": plan.status})
    handled, replan = run(again, Observed(pods=pods(job, pod, kubelet(failures))))
    assert (handled, replan.events, replan.status) == (False, [], plan.status), "one Event per failure"


def test_earlier_attempts_count_with_the_restarts_in_place() -> None:
    job = on_failure_job(2, attempt=2).obj()
    handled, plan = run(job, Observed(pods=pods(job, "pi-launcher-2", crash_looping(1), attempt=2)))
    assert handled
    condition = plan.status.condition("Failed")
    assert condition is not None and condition.message is not None
    assert condition.message.startswith("MPIJob ns/pi has failed (backoffLimit 2 exceeded: 3 failures after 2 "
                                        "restarts, 1 of them restarted in place): pi-launcher-2")


def test_failed_pod_after_restarts_in_place_counts_them() -> None:
    job = on_failure_job(6).obj()
    found = pods(job, LAUNCHER, rerunning(2))
    found[2]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low memory"}
    handled, plan = run(job, Observed(pods=found))
    assert handled and plan.status.restart_count == 1
    restarting = plan.status.condition("Restarting")
    assert restarting is not None and restarting.message is not None
    assert restarting.message.startswith(
        "MPIJob ns/pi is restarting (restart 1, failure 3 with 2 restarted in place of backoffLimit 6): pi-worker-1")

    job = on_failure_job(2).obj()
    found = pods(job, LAUNCHER, rerunning(2))
    found[2]["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low memory"}
    _, plan = run(job, Observed(pods=found))
    assert plan.status.is_true("Failed"), "2 failures in place and a failed pod pass backoffLimit 2"


def test_before_the_job_runs_restarting_counts_them() -> None:
    job = on_failure_job(6).obj()
    job.status.conditions = [c for c in job.status.conditions if c.type != "Running"]
    _, plan = run(job, Observed(pods=pods(job, LAUNCHER, crash_looping(2))))
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert (restarting.status, restarting.reason) == ("True", "ContainerRestarted")
    assert restarting.message == ("MPIJob ns/pi is restarting in place: pi-launcher container main Error "
                                  "exit 1 (2 failed runs, restarted in place); failure 2 of backoffLimit 6")
    assert [e.reason for e in plan.events] == ["ContainerRestarted"]


def test_report_blames_the_dead_worker_and_reads_the_previous_log() -> None:
    """Past the limit the launcher and a worker both restarted in place: the worker is blamed, and the tail is
    the launcher's previous run (mpirun's error)."""
    job = on_failure_job(1).obj()
    found = pods(job, LAUNCHER, crash_looping(2))
    found[1]["status"] = rerunning(1, exit_code=255)
    observed = Observed(pods=found)
    request = failure_report.log_request(job, observed, 0)
    assert request == failure_report.LogRequest("pi-launcher", "main", previous=True)
    observed.log_tails["pi-launcher"] = "ssh: connect to host pi-worker-0 port 22: Connection refused"
    handled, plan = run(job, observed)
    assert handled
    condition = plan.status.condition("Failed")
    assert condition is not None
    assert condition.message == (
        "MPIJob ns/pi has failed (backoffLimit 1 exceeded: 3 failures after 0 restarts, 3 of them restarted in "
        "place): pi-worker-0 (rank 0, node n1) container main Error exit 255; then the launcher pi-launcher "
        "(node n1) container main Error exit 1; the attempt's logs are kept in ConfigMap pi-attempt-0\n"
        "Last lines of pi-launcher/main:\n"
        "ssh: connect to host pi-worker-0 port 22: Connection refused")


def test_within_the_limit_no_log_is_read() -> None:
    job = on_failure_job(6).obj()
    assert failure_report.log_request(job, Observed(pods=pods(job, LAUNCHER, crash_looping(3))), 0) is None


@pytest.mark.parametrize("limit", [0, 1, 6])
def test_healed_launcher_is_no_failure(limit: int) -> None:
    """A pod that finished is no longer counted (as the Job controller counts only active pods' restarts)."""
    job = on_failure_job(limit).obj()
    handled, plan = run(job, Observed(pods=pods(job, LAUNCHER, healed(1))))
    assert (handled, plan.events, plan.status) == (False, [], job.status)


def test_pods_being_deleted_count_no_more() -> None:
    """A crash-looping worker going away (a scale-down) neither fails the job nor is noted."""
    job = on_failure_job(0).obj()
    found = pods(job, WORKER, crash_looping(3))
    found[2]["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    observed = Observed(pods=found)
    assert observed.in_place_failures(0) == 0
    assert run(job, observed) == (False, Plan(status=job.status))


def test_a_dropped_last_state_is_no_new_failure() -> None:
    """The kubelet may report a restarted container without its lastState: the pod is still named, the count is
    the same, and no second Event is sent."""
    job = on_failure_job(6).obj()
    _, plan = run(job, Observed(pods=pods(job, LAUNCHER, rerunning(1))))
    assert [e.reason for e in plan.events] == ["ContainerRestarted"]
    dropped = rerunning(1)
    dropped["containerStatuses"][0]["lastState"] = {}
    again = job.model_copy(update={"status": plan.status})
    _, replan = run(again, Observed(pods=pods(job, LAUNCHER, dropped)))
    assert replan.events == []
    running = replan.status.condition("Running")
    assert running is not None and running.message == (
        "MPIJob ns/pi is running; pi-launcher (1 failed run, restarted in place); failure 1 of backoffLimit 6")
