"""mpiop.policies.graceful_stop, through decide(): a suspend, a disruption restart or the deadline deletes the running
launcher first (with the stop grace) and its workers only once it ended or the grace passed; a failure restart is
not delayed; a grace above the pods' terminationGracePeriodSeconds is capped, saying so."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from mpiop import metrics, podstate
from mpiop.api.v2beta1 import JobCondition, JobStatus, MPIJob
from mpiop.decide import decide
from mpiop.desired.settings import Settings
from mpiop.names import STOP_GRACE_ANNOTATION
from mpiop.plan import Observed, Plan
from mpiop.policies import graceful_stop
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod

GRACE = 20


def base(restart_count: int | None = None, disruption_restarts: int | None = None) -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(2).backoff_limit(3).condition("Created")
            .condition("Running", when=at(50))
            .status(start_time=at(0), restart_count=restart_count, disruption_restarts=disruption_restarts))


def pods(job: MPIJob, attempt: int = 0) -> dict[str, PodBuilder]:
    return {"launcher": make_pod(job, "launcher", 0, attempt).running(),
            "worker-0": make_pod(job, "worker", 0, attempt).running(),
            "worker-1": make_pod(job, "worker", 1, attempt).running()}


def run(job: MPIJob, builders: list[PodBuilder], now: float = 100, grace: int = GRACE) -> Plan:
    return decide(job, Observed(pods=[b.obj() for b in builders]), at(now), Settings(stop_grace_seconds=grace))


def deleted(plan: Plan) -> dict[str, int | None]:
    """The pods the plan deletes, with their own grace (None: the pod's)."""
    return {podstate.name(p): plan.pod_grace_seconds.get(podstate.name(p)) for p in plan.pods_to_delete}


def with_pod(job: MPIJob, which: str, pod: PodBuilder) -> list[PodBuilder]:
    return list({**pods(job), which: pod}.values())


SUSPENDED = base().suspend().obj()
DISRUPTED = base().obj()
DEADLINE = base().deadline(60).obj()
FAILED = base().obj()


@pytest.mark.parametrize(
    ("job", "builders", "grace", "expected", "stopping", "events"),
    [
        (SUSPENDED, list(pods(SUSPENDED).values()), GRACE, {"pi-launcher": GRACE}, "Suspended",
         ["Checkpointing", "MPIJobSuspended"]),
        (DISRUPTED, with_pod(DISRUPTED, "worker-1", make_pod(DISRUPTED, "worker", 1).running().disrupted()
                             .terminating()), GRACE, {"pi-launcher": GRACE}, "Disrupted",
         ["Checkpointing", "MPIJobRestarting"]),
        (DEADLINE, list(pods(DEADLINE).values()), GRACE, {"pi-launcher": GRACE}, "DeadlineExceeded",
         ["Checkpointing", "DeadlineExceeded"]),
        # A rank already died: nothing to checkpoint with, the restart is not delayed.
        (FAILED, with_pod(FAILED, "worker-1", make_pod(FAILED, "worker", 1).failed()), GRACE,
         {"pi-launcher": None, "pi-worker-0": None, "pi-worker-1": None}, None, ["MPIJobRestarting"]),
        # No grace (the default): today's deletion of every pod at once.
        (SUSPENDED, list(pods(SUSPENDED).values()), 0,
         {"pi-launcher": None, "pi-worker-0": None, "pi-worker-1": None}, None, ["MPIJobSuspended"]),
        # No mpirun runs yet (the launcher Pending): nothing to tell.
        (SUSPENDED, with_pod(SUSPENDED, "launcher", make_pod(SUSPENDED, "launcher").pending()), GRACE,
         {"pi-launcher": None, "pi-worker-0": None, "pi-worker-1": None}, None, ["MPIJobSuspended"]),
    ],
    ids=["suspend", "disruption", "deadline", "failure-not-delayed", "no-grace", "launcher-pending"],
)
def test_a_stop_deletes_the_launcher_first(job: MPIJob, builders: list[PodBuilder], grace: int,
                                           expected: dict[str, int | None], stopping: str | None,
                                           events: list[str]) -> None:
    plan = run(job, builders, grace=grace)
    assert deleted(plan) == expected
    assert [e.reason for e in plan.events] == events
    condition = plan.status.condition("Stopping")
    if stopping is None:
        assert condition is None
        return
    assert condition is not None and (condition.status, condition.reason) == ("True", stopping)
    print(condition.message)
    assert condition.message == (
        f"MPIJob ns/pi is stopping gracefully ({stopping}): launcher pi-launcher was sent SIGTERM; the workers are "
        "deleted once it has ended, or at 2024-05-01T12:02:00Z (stop grace 20s, --stop-grace-seconds)")
    assert plan.status.conditions[-1].type == "Stopping"  # the State column shows it
    assert plan.requeue_after == GRACE
    assert not plan.creation_steps.pods()


def stopping_since(builder: MPIJobBuilder, reason: str, since: float = 100) -> MPIJobBuilder:
    return builder.condition("Stopping", reason=reason, message="stopping", when=at(since))


def going_launcher(job: MPIJob, attempt: int = 0) -> PodBuilder:
    return make_pod(job, "launcher", 0, attempt).running().terminating(at(100 + GRACE))


SUSPENDING = stopping_since(base().suspend(), "Suspended").obj()
RESUMED = stopping_since(base().condition("Suspended", "False", reason="MPIJobResumed").status(start_time=None),
                         "Suspended").obj()


@pytest.mark.parametrize(
    ("job", "builders", "now", "expected", "result"),
    [
        # The launcher still runs within the grace: nothing but it is deleted, no pod made, woken at the deadline.
        (SUSPENDING, with_pod(SUSPENDING, "launcher", going_launcher(SUSPENDING)), 110, {}, None),
        # A launcher not deleted yet (the write did not land): deleted with the grace left.
        (SUSPENDING, list(pods(SUSPENDING).values()), 113, {"pi-launcher": 7}, None),
        # Resumed meanwhile: the stop carries on, and nothing is made.
        (RESUMED, with_pod(RESUMED, "launcher", going_launcher(RESUMED)), 110, {}, None),
        # The launcher ended: the workers go.
        (SUSPENDING, [pods(SUSPENDING)["worker-0"], pods(SUSPENDING)["worker-1"]], 112,
         {"pi-worker-0": None, "pi-worker-1": None}, "LauncherEnded"),
        (RESUMED, [pods(RESUMED)["worker-0"], pods(RESUMED)["worker-1"]], 112,
         {"pi-worker-0": None, "pi-worker-1": None}, "LauncherEnded"),
        # The grace passed first: the workers go all the same.
        (SUSPENDING, with_pod(SUSPENDING, "launcher", going_launcher(SUSPENDING)), 100 + GRACE,
         {"pi-worker-0": None, "pi-worker-1": None}, "GraceExpired"),
    ],
    ids=["waiting", "launcher-left", "resumed-waiting", "launcher-ended", "resumed-launcher-ended", "grace-passed"],
)
def test_a_stop_under_way(job: MPIJob, builders: list[PodBuilder], now: float, expected: dict[str, int | None],
                          result: str | None) -> None:
    plan = run(job, builders, now=now)
    assert deleted(plan) == expected
    assert not plan.creation_steps.pods()
    condition = plan.status.condition("Stopping")
    assert condition is not None
    if result is None:
        assert condition.status == "True"
        assert plan.requeue_after == 100 + GRACE - now
        assert [e.reason for e in plan.events if e.reason.startswith(("Checkpointing", "GracefulStop"))] == []
        return
    assert (condition.status, condition.reason) == ("False", result)
    took = int(now - 100)
    how = ("the launcher ended before its workers were deleted" if result == "LauncherEnded"
           else "the grace passed before the launcher ended: its workers are deleted")
    assert condition.message == f"MPIJob ns/pi stopped gracefully (Suspended) in {took}s: {how}"
    event = next(e for e in plan.events if e.reason == "GracefulStop")
    assert (event.type, event.message) == ("Normal" if result == "LauncherEnded" else "Warning", condition.message)


def test_a_stop_whose_grace_passed_does_not_begin_again() -> None:
    """Found on the real node: the grace passed with the launcher still going, every pod was deleted, and the next
    pass of the still-suspended job began a second stop (Checkpointing again) for the launcher already told."""
    job = (base().suspend().condition("Stopping", "False", reason=graceful_stop.GRACE_EXPIRED, when=at(120))
           .obj())
    builders = [going_launcher(job), *(make_pod(job, "worker", i).running().terminating(at(150)) for i in range(2))]
    plan = run(job, builders, now=125)
    stopped = plan.status.condition("Stopping")
    assert stopped is not None and stopped.status == "False"
    assert "Checkpointing" not in [e.reason for e in plan.events]


def test_a_disruption_stop_then_the_next_attempt() -> None:
    """After a disruption restart, the old attempt's workers go once its launcher ended; the new attempt's pods
    come only once they are gone (ensure: same names)."""
    job = stopping_since(base(restart_count=1, disruption_restarts=1).condition("Restarting"), "Disrupted").obj()
    old = pods(job, attempt=0)
    plan = run(job, [old["worker-0"], old["worker-1"]], now=105)
    assert deleted(plan) == {"pi-worker-0": None, "pi-worker-1": None}
    assert not plan.creation_steps.pods()
    ended = base(restart_count=1, disruption_restarts=1).condition("Restarting").condition(
        "Stopping", "False", reason="LauncherEnded").obj()
    going = [old["worker-0"].terminating(at(105)), old["worker-1"].terminating(at(105))]
    assert [podstate.name(p) for p in run(ended, going, now=106).creation_steps.pods()] == []
    made = run(ended, [], now=107).creation_steps.pods()
    assert sorted((podstate.name(p), podstate.attempt(p)) for p in made) == [
        ("pi-launcher-1", 1), ("pi-worker-0", 1), ("pi-worker-1", 1)]


def test_resumed_before_the_suspended_pods_are_gone_waits() -> None:
    """No stop grace, resumed at once: no pod is made while the suspended attempt's pods are still going."""
    job = base().condition("Suspended", "False", reason="MPIJobResumed").status(start_time=None).obj()
    going = [b.terminating(at(90)) for b in pods(job).values()]
    plan = run(job, going, grace=0)
    assert not plan.creation_steps.pods()
    assert plan.status.start_time is None
    plan = run(job, [], grace=0)
    assert sorted(podstate.name(p) for p in plan.creation_steps.pods()) == ["pi-launcher", "pi-worker-0",
                                                                          "pi-worker-1"]


@pytest.mark.parametrize(
    ("annotation", "flag", "termination", "most", "seconds", "note"),
    [
        (None, 20, None, 600, 20, ""),
        ("600", 20, None, 600, 30, "annotation mpiop.kubeflow.org/stop-grace-seconds=600 is capped at 30, the pods' "
                                   "terminationGracePeriodSeconds (the kubelet kills them no later)"),
        (None, 100, 45, 600, 45, "--stop-grace-seconds=100 is capped at 45, the pods' terminationGracePeriodSeconds "
                                 "(the kubelet kills them no later)"),
        ("0", 20, None, 600, 0, ""),
        ("45", 0, 60, 600, 45, ""),
        # A tenant asking a day with a day of terminationGracePeriodSeconds: the operator's ceiling holds.
        ("86400", 20, 86400, 600, 600, "annotation mpiop.kubeflow.org/stop-grace-seconds=86400 is capped at 600, "
                                       "the operator's --max-stop-grace-seconds"),
        (None, 300, 86400, 120, 120, "--stop-grace-seconds=300 is capped at 120, the operator's "
                                     "--max-stop-grace-seconds"),
        ("3600", 0, 3600, 0, 0, "annotation mpiop.kubeflow.org/stop-grace-seconds=3600 is capped at 0, the "
                                "operator's --max-stop-grace-seconds"),
    ],
    ids=["flag", "annotation-capped", "flag-capped", "annotation-off", "annotation-on", "tenant-asks-a-day",
         "flag-over-the-ceiling", "ceiling-0-turns-it-off"],
)
def test_the_grace_and_its_cap(annotation: str | None, flag: int, termination: int | None, most: int, seconds: int,
                               note: str) -> None:
    builder = make_mpijob("pi").workers(1)
    if annotation is not None:
        builder.annotation(STOP_GRACE_ANNOTATION, annotation)
    if termination is not None:
        builder.pod_spec("Launcher", terminationGracePeriodSeconds=termination)
        builder.pod_spec("Worker", terminationGracePeriodSeconds=termination + 5)
    grace = graceful_stop.grace(builder.obj(), Settings(stop_grace_seconds=flag, max_stop_grace_seconds=most))
    assert (grace.seconds, grace.note()) == (seconds, note)


def test_a_capped_grace_is_told_by_a_warning() -> None:
    job = base().suspend().annotation(STOP_GRACE_ANNOTATION, "600").obj()
    plan = run(job, list(pods(job).values()))
    assert deleted(plan) == {"pi-launcher": 30}
    assert [(e.type, e.reason, e.message) for e in plan.events[:2]] == [
        ("Normal", "Checkpointing", plan.status.conditions[-1].message),
        ("Warning", "StopGraceCapped", "MPIJob ns/pi: annotation mpiop.kubeflow.org/stop-grace-seconds=600 is capped "
                                       "at 30, the pods' terminationGracePeriodSeconds (the kubelet kills them no "
                                       "later)")]


@pytest.mark.parametrize("value", ["-1", "ten", "1.5", ""])
def test_a_bad_annotation_fails_the_job_naming_it(value: str) -> None:
    job = base().annotation(STOP_GRACE_ANNOTATION, value).obj()
    plan = run(job, list(pods(job).values()))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert f"metadata.annotations[{STOP_GRACE_ANNOTATION}]: {value!r} is not a whole number" in (failed.message
                                                                                                   or "")


def test_notice_tells_the_reason_and_deadline() -> None:
    assert graceful_stop.notice(base().obj(), Settings(stop_grace_seconds=GRACE)) is None
    job = stopping_since(base(), "Disrupted").obj()
    assert graceful_stop.notice(job, Settings(stop_grace_seconds=GRACE)) == {
        "reason": "Disrupted", "deadline": "2024-05-01T12:02:00Z"}


def _status(condition: JobCondition | None) -> JobStatus:
    return JobStatus(conditions=[condition] if condition else [])


def test_a_graceful_stop_is_counted_with_its_duration() -> None:
    def count(result: str) -> float:
        return REGISTRY.get_sample_value("mpiop_graceful_stops_total",
                                         {"reason": "Disrupted", "result": result}) or 0.0

    def seconds() -> float:
        return REGISTRY.get_sample_value("mpiop_graceful_stop_duration_seconds_sum", {"reason": "Disrupted"}) or 0.0

    assert REGISTRY.get_sample_value("mpiop_graceful_stops_total",
                                     {"reason": "Suspended", "result": "grace_expired"}) is not None  # from 0
    before, took = count("launcher_ended"), seconds()
    true = JobCondition(type="Stopping", status="True", reason="Disrupted", last_transition_time=at(100))
    false = JobCondition(type="Stopping", status="False", reason="LauncherEnded", last_transition_time=at(112))
    metrics.count_graceful_stop(_status(true), _status(false), at(112))
    metrics.count_graceful_stop(_status(false), _status(false), at(113))  # nothing more: it ended once
    metrics.count_graceful_stop(_status(None), _status(true), at(100))
    assert (count("launcher_ended") - before, seconds() - took) == (1, 12)


def test_a_tenants_day_long_grace_is_held_to_the_operators_ceiling() -> None:
    job = (base().suspend().annotation(STOP_GRACE_ANNOTATION, "86400")
           .pod_spec("Launcher", terminationGracePeriodSeconds=86400)
           .pod_spec("Worker", terminationGracePeriodSeconds=86400).obj())
    plan = run(job, list(pods(job).values()))
    assert (deleted(plan), plan.requeue_after) == ({"pi-launcher": 600}, 600)
    assert [(e.type, e.reason, e.message) for e in plan.events[1:2]] == [
        ("Warning", "StopGraceCapped", "MPIJob ns/pi: annotation mpiop.kubeflow.org/stop-grace-seconds=86400 is "
                                       "capped at 600, the operator's --max-stop-grace-seconds")]


def test_a_stop_reason_no_policy_writes_is_counted_as_other() -> None:
    """Whoever may patch mpijobs/status writes the Stopping condition: a reason of its own makes no series."""
    made_up = JobCondition(type="Stopping", status="True", reason="Made\x1bUp", last_transition_time=at(100))
    ended = JobCondition(type="Stopping", status="False", reason="LauncherEnded", last_transition_time=at(101))
    before = REGISTRY.get_sample_value("mpiop_graceful_stops_total",
                                       {"reason": "Other", "result": "launcher_ended"}) or 0.0
    metrics.count_graceful_stop(_status(made_up), _status(ended), at(101))
    assert REGISTRY.get_sample_value("mpiop_graceful_stops_total",
                                     {"reason": "Other", "result": "launcher_ended"}) == before + 1
    assert REGISTRY.get_sample_value("mpiop_graceful_stops_total",
                                     {"reason": "Made\x1bUp", "result": "launcher_ended"}) is None


def test_a_gang_the_scheduler_preempted_whole_is_told_and_its_next_attempt_waits() -> None:
    """Workload-aware preemption deletes every pod of the gang itself, each with its own grace: nothing is left
    for mpiop to order, but the stop is recorded (Stopping, Checkpointing, the status endpoint's notice) and no pod
    of the next attempt is made while the old ones go."""
    job = DISRUPTED
    why = "Preempted by a workload with higher priority"
    builders = [make_pod(job, role, i).running().disrupted("PreemptionByScheduler", why).terminating(at(130))
                for role, i in (("launcher", 0), ("worker", 0), ("worker", 1))]
    plan = run(job, builders, now=100)
    assert deleted(plan) == {}  # all going already
    assert not plan.creation_steps.pods()
    assert plan.status.restart_count == 1 and plan.status.disruptions == 1
    stopping = plan.status.condition("Stopping")
    assert stopping is not None and (stopping.status, stopping.reason) == ("True", "Disrupted")
    assert stopping.message is not None and stopping.message.startswith(
        "MPIJob ns/pi is stopping gracefully (Disrupted): PreemptionByScheduler deleted launcher pi-launcher and "
        f"every worker at once ({why}); the kubelet sends them SIGTERM together and kills them at ")
    assert stopping.message.endswith(f"the next attempt waits for them, at most {GRACE}s (stop grace, "
                                     "--stop-grace-seconds)")
    assert [e.reason for e in plan.events][:1] == ["Checkpointing"]
    assert plan.requeue_after == GRACE


def test_every_pod_deleted_with_no_disruption_on_the_launcher_begins_no_stop() -> None:
    """A worker preempted alone while mpiop's own stop already deletes every pod: the launcher carries no
    DisruptionTarget, so it was told already and no second stop begins."""
    job = DISRUPTED
    builders = [going_launcher(job), make_pod(job, "worker", 0).running().terminating(at(130)),
                make_pod(job, "worker", 1).running().disrupted("PreemptionByScheduler").terminating(at(130))]
    plan = run(job, builders, now=100)
    assert plan.status.condition("Stopping") is None
    assert "Checkpointing" not in [e.reason for e in plan.events]
