"""mpiop.policies.failure: a failed pod restarts the whole job until failures exceed backoffLimit."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob, RestartPolicy
from mpiop.plan import Observed, Plan
from mpiop.policies import failure
from mpiop.policies.outcome import STOP
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod

SAVED = "; the attempt's logs are kept in ConfigMap pi-attempt-"  # then the attempt's number (restartCount)


def run(job: MPIJob, pods: list[PodBuilder], now: float = 100) -> tuple[bool, Plan]:
    plan = Plan(status=job.status.model_copy(deep=True))
    handled = failure.apply(plan, job, Observed(pods=[p.obj() for p in pods]), at(now)) is STOP
    return handled, plan


def base(backoff: int | None = None, attempt: int = 0) -> MPIJobBuilder:
    builder = make_mpijob("pi", "ns").workers(2).status(restart_count=attempt or None).condition("Created")
    if backoff is not None:
        builder.backoff_limit(backoff)
    return builder


def all_pods(job: MPIJob, attempt: int = 0) -> list[PodBuilder]:
    return [make_pod(job, "launcher", 0, attempt).running(), make_pod(job, "worker", 0, attempt).running(),
            make_pod(job, "worker", 1, attempt).running()]


def test_no_failure_does_nothing() -> None:
    job = base().obj()
    handled, plan = run(job, all_pods(job))
    assert handled is False
    assert plan.status == job.status
    assert (plan.pods_to_delete, plan.events) == ([], [])


@pytest.mark.parametrize(
    ("failed", "summary", "deleted"),
    [
        (make_pod(base().obj(), "launcher").failed(exit_code=1),
         "pi-launcher container main Error exit 1; the failed launcher pi-launcher is kept for `kubectl logs`"
         f"{SAVED}0",
         ["pi-worker-0", "pi-worker-1"]),
        (make_pod(base().obj(), "worker", 1).failed(reason="OOMKilled", exit_code=137),
         f"pi-worker-1 (rank 1) container main OOMKilled exit 137{SAVED}0",
         ["pi-launcher", "pi-worker-0", "pi-worker-1"]),
        (make_pod(base().obj(), "worker", 0).evicted("The node was low on resource: memory."),
         f"pi-worker-0 (rank 0) Evicted: The node was low on resource: memory.{SAVED}0",
         ["pi-launcher", "pi-worker-0", "pi-worker-1"]),
    ],
    ids=["launcher-error", "worker-oomkilled", "worker-evicted"],
)
def test_failure_restarts_whole_job(failed: PodBuilder, summary: str, deleted: list[str]) -> None:
    job = base().condition("Running", when=at(50)).obj()
    pods = [p for p in all_pods(job) if podstate.name(p.obj()) != podstate.name(failed.obj())] + [failed]
    handled, plan = run(job, pods)
    assert handled is True
    assert plan.status.restart_count == 1
    message = f"MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): {summary}"
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert (restarting.status, restarting.reason, restarting.message) == ("True", "MPIJobRestarting", message)
    assert restarting.last_transition_time == at(100)
    running = plan.status.condition("Running")
    assert running is not None
    assert (running.status, running.reason) == ("False", "MPIJobRestarting")
    assert plan.status.conditions[-1].type == "Restarting"
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "MPIJobRestarting", message)]
    assert sorted(podstate.name(p) for p in plan.pods_to_delete) == deleted
    assert not plan.status.finished
    assert plan.status.completion_time is None


def test_launcher_failure_reported_before_workers() -> None:
    job = base().obj()
    pods = [make_pod(job, "worker", 0).failed(exit_code=255), make_pod(job, "worker", 1).failed(exit_code=137),
            make_pod(job, "launcher").failed(exit_code=2)]
    _, plan = run(job, pods)
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert "pi-launcher container main Error exit 2" in (restarting.message or "")


def test_lowest_worker_reported_first() -> None:
    job = base().workers(12).obj()
    pods = [make_pod(job, "worker", 10).failed(exit_code=3), make_pod(job, "worker", 2).failed(exit_code=4)]
    _, plan = run(job, pods)
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert "pi-worker-2 (rank 2) container main Error exit 4" in (restarting.message or "")


@pytest.mark.parametrize(
    ("backoff", "attempt", "fails"),
    [
        (0, 0, True),
        (1, 0, False),
        (1, 1, True),
        (2, 1, False),
        (2, 2, True),
        (None, 5, False),
        (None, 6, True),
    ],
    ids=["limit0-first-fails", "limit1-first-restarts", "limit1-second-fails", "limit2-second-restarts",
         "limit2-third-fails", "default6-sixth-restarts", "default6-seventh-fails"],
)
def test_backoff_limit_boundaries(backoff: int | None, attempt: int, fails: bool) -> None:
    job = base(backoff, attempt).obj()
    handled, plan = run(job, [make_pod(job, "worker", 1, attempt).failed(exit_code=1)])
    assert handled is True
    assert plan.status.is_true("Failed") is fails
    assert plan.status.finished is fails
    if fails:
        limit = 6 if backoff is None else backoff
        assert plan.status.restart_count == (attempt or None)
        assert plan.status.completion_time == at(100)
        failed = plan.status.condition("Failed")
        assert failed is not None
        assert failed.reason == "MPIJobFailed"
        assert failed.message == (f"MPIJob ns/pi has failed (backoffLimit {limit} reached after {attempt} restarts): "
                                  f"pi-worker-1 (rank 1) container main Error exit 1{SAVED}{attempt}")
        assert plan.status.conditions[-1].type == "Failed"
        assert plan.pods_to_delete == [], "clean-up is cleanPodPolicy's business"
        assert [(e.type, e.reason) for e in plan.events] == [("Warning", "MPIJobFailed")]
    else:
        assert plan.status.restart_count == attempt + 1
        assert plan.status.is_true("Restarting")


def test_failed_ends_running_and_restarting() -> None:
    job = base(1, 1).condition("Restarting", when=at(10)).condition("Running", when=at(20)).obj()
    _, plan = run(job, [make_pod(job, "launcher", 0, 1).failed()])
    assert [f"{c.type}={c.status}" for c in plan.status.conditions] == [
        "Created=True", "Restarting=False", "Running=False", "Failed=True"]


@pytest.mark.parametrize(
    ("policy", "exit_code", "permanent"),
    [
        ("ExitCode", 1, True),
        ("ExitCode", 127, True),
        ("ExitCode", 128, False),
        ("ExitCode", 137, False),
        ("ExitCode", 255, False),
        ("Never", 1, False),
        ("OnFailure", 1, False),
    ],
    ids=["exitcode-1", "exitcode-127", "exitcode-128", "exitcode-137", "exitcode-255", "never-1", "onfailure-1"],
)
def test_exit_code_policy(policy: RestartPolicy, exit_code: int, permanent: bool) -> None:
    job = base().restart_policy("Launcher", policy).obj()
    handled, plan = run(job, [make_pod(job, "launcher").failed(exit_code=exit_code)])
    assert handled is True
    assert plan.status.is_true("Failed") is permanent
    assert plan.status.is_true("Restarting") is not permanent
    if permanent:
        failed = plan.status.condition("Failed")
        assert failed is not None
        assert failed.message == ("MPIJob ns/pi has failed (permanent exit code (restartPolicy ExitCode) reached "
                                  f"after 0 restarts): pi-launcher container main Error exit {exit_code}{SAVED}0")


def test_exit_code_policy_is_per_replica() -> None:
    job = base().restart_policy("Launcher", "ExitCode").obj()
    _, plan = run(job, [make_pod(job, "worker", 0).failed(exit_code=1)])
    assert plan.status.is_true("Restarting")
    assert not plan.status.is_true("Failed")


def test_exit_code_policy_evicted_pod_is_retryable() -> None:
    job = base().restart_policy("Worker", "ExitCode").obj()
    _, plan = run(job, [make_pod(job, "worker", 0).evicted()])
    assert plan.status.restart_count == 1


def test_failure_of_an_old_attempt_is_not_counted_again() -> None:
    job = base(attempt=1).condition("Restarting").obj()
    old = make_pod(job, "worker", 1, attempt=0).failed(reason="OOMKilled", exit_code=137)
    handled, plan = run(job, [old, *all_pods(job, attempt=1)])
    assert handled is False
    assert plan.status.restart_count == 1
    assert plan.pods_to_delete == []
    assert plan.events == []


def test_failure_counted_once_per_attempt_even_when_many_pods_fail() -> None:
    job = base().obj()
    pods = [make_pod(job, "launcher").failed(), make_pod(job, "worker", 0).failed(),
            make_pod(job, "worker", 1).evicted()]
    _, plan = run(job, pods)
    assert plan.status.restart_count == 1
    assert len(plan.events) == 1


@pytest.mark.parametrize(
    "pod",
    [
        # A worker removed by a scale-down, killed while it goes.
        make_pod(make_mpijob("pi"), "worker", 2).failed(exit_code=143).terminating(),
        # A pod deleted by suspend, killed while it goes, seen again after the resume.
        make_pod(make_mpijob("pi"), "worker", 0).failed(exit_code=137).terminating(),
        make_pod(make_mpijob("pi"), "launcher").failed(exit_code=1).terminating(),
    ],
    ids=["scaled-down-worker", "suspended-worker", "suspended-launcher"],
)
def test_pods_being_deleted_are_not_failures(pod: PodBuilder) -> None:
    job = base().obj()
    handled, plan = run(job, [pod])
    assert handled is False
    assert plan.status.restart_count is None
    assert not plan.status.is_true("Restarting")


def test_restart_leaves_terminating_pods_alone() -> None:
    job = base().obj()
    pods = [make_pod(job, "launcher").failed(), make_pod(job, "worker", 0).running().terminating(),
            make_pod(job, "worker", 1).running()]
    _, plan = run(job, pods)
    assert [podstate.name(p) for p in plan.pods_to_delete] == ["pi-worker-1"], "the failed launcher is kept"


def test_restart_names_the_dead_worker_carries_the_tail_and_keeps_the_launcher() -> None:
    job = base().obj()
    tail = "\n".join(["step 1", "mpirun noticed that process rank 1 with PID 0 on node pi-worker-1 exited on "
                      "signal 9 (Killed).", *(f"x{i}" * 40 for i in range(30))])
    pods = [make_pod(job, "launcher").on_node("n0").failed(exit_code=137), make_pod(job, "worker", 0).running(),
            make_pod(job, "worker", 1).on_node("n2").running()]
    observed = Observed(pods=[p.obj() for p in pods], log_tails={"pi-launcher": tail})
    plan = Plan(status=job.status.model_copy(deep=True))
    assert failure.apply(plan, job, observed, at(100)) is STOP
    restarting = plan.status.condition("Restarting")
    assert restarting is not None and restarting.message is not None
    assert restarting.message.startswith(
        "MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): worker pi-worker-1 (rank 1, node n2), per the "
        "launcher's log: mpirun noticed that process rank 1 with PID 0 on node pi-worker-1 exited on signal 9 "
        "(Killed).; then the launcher pi-launcher (node n0) container main Error exit 137; the failed launcher "
        f"pi-launcher is kept for `kubectl logs`{SAVED}0\nLast lines of pi-launcher/main:\n")
    assert restarting.message.endswith(tail)
    [event] = plan.events
    assert len(event.message) <= 1024 and event.message.endswith(tail[-200:])
    assert plan.status.last_failure is not None
    assert plan.status.last_failure.model_dump(exclude_none=True) == {
        "reason": "RankFailed", "pod": "pi-worker-1", "node": "n2", "ranks": "1", "attempt": 0, "time": at(100)}
    assert plan.status.attempt_start_time == at(100)
    assert sorted(podstate.name(p) for p in plan.pods_to_delete) == ["pi-worker-0", "pi-worker-1"]


def test_final_failure_records_the_last_failure() -> None:
    job = base(0).obj()
    _, plan = run(job, [make_pod(job, "worker", 1).on_node("n2").failed(reason="OOMKilled", exit_code=137)])
    assert plan.status.last_failure is not None
    assert (plan.status.last_failure.reason, plan.status.last_failure.pod) == ("OOMKilled", "pi-worker-1")
    assert plan.status.attempt_start_time is None, "no new attempt"
