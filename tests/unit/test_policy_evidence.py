"""mpiop.policies.evidence: a failed attempt's logs are asked to be saved, the last K attempts kept."""

from __future__ import annotations

import json

import pytest

from mpiop.api.v2beta1 import MPIJob, TrainerStatus
from mpiop.decide import decide
from mpiop.desired.settings import Settings
from mpiop.plan import Evidence, LogSource, Observed
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod, observe


def base(backoff: int = 6, restarts: int = 0) -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(3).backoff_limit(backoff).condition("Created").condition("Running")
            .status(restart_count=restarts or None, start_time=at(0)))


def attempt_config_map(job: MPIJob, attempt: int) -> dict[str, object]:
    return {"metadata": {"name": f"pi-attempt-{attempt}", "namespace": "ns",
                         "labels": {"mpiop.kubeflow.org/attempt": str(attempt)}}}


def evidence_of(job: MPIJob, pods: list[PodBuilder], kept: list[int] | None = None,
                keep: int = 3) -> Evidence | None:
    observed = observe(job, [p.obj() for p in pods])
    observed.attempt_config_maps = [attempt_config_map(job, a) for a in kept or []]
    return decide(job, observed, at(100), Settings(kept_attempts=keep)).evidence


def test_nothing_is_saved_while_no_attempt_fails() -> None:
    job = base().obj()
    pods = [make_pod(job, "launcher").running(), *(make_pod(job, "worker", i).running() for i in range(3))]
    assert evidence_of(job, pods) is None


NOT_STARTED = "no container of this pod started"


def on(pod: PodBuilder, node: str = "n1") -> PodBuilder:
    return pod.on_node(node)


@pytest.mark.parametrize(
    ("pods", "logs"),
    [
        ([on(make_pod(base().obj(), "launcher").ready()), on(make_pod(base().obj(), "worker", 0).ready()),
          on(make_pod(base().obj(), "worker", 1).failed(reason="OOMKilled", exit_code=137)),
          on(make_pod(base().obj(), "worker", 2).ready())],
         [LogSource("pi-launcher", None, unreadable=NOT_STARTED), LogSource("pi-worker-1", "main")]),
        ([on(make_pod(base().obj(), "launcher").failed(exit_code=1)), on(make_pod(base().obj(), "worker", 0).ready()),
          on(make_pod(base().obj(), "worker", 1).restarted()), make_pod(base().obj(), "worker", 2).pending()],
         [LogSource("pi-launcher", "main"), LogSource("pi-worker-1", "main", previous=True)]),
        ([on(make_pod(base().obj(), "launcher").ready()),
          on(make_pod(base().obj(), "worker", 0).running().disrupted().terminating()),
          make_pod(base().obj(), "worker", 1).failed(exit_code=1), on(make_pod(base().obj(), "worker", 2).ready())],
         [LogSource("pi-launcher", None, unreadable=NOT_STARTED),
          LogSource("pi-worker-0", None, unreadable=NOT_STARTED),
          LogSource("pi-worker-1", "main", unreadable="the pod was never scheduled to a node")]),
    ],
    ids=["worker-oomkilled", "launcher-failed-worker-restarted-in-place", "evicted-and-unscheduled"],
)
def test_a_failed_attempt_saves_the_launcher_and_each_failed_pod(pods: list[PodBuilder],
                                                                 logs: list[LogSource]) -> None:
    job = base().obj()
    found = evidence_of(job, pods)
    assert found is not None
    assert (found.name, found.attempt, found.logs, found.drop) == ("pi-attempt-0", 0, logs, [])
    assert found.summary.startswith("MPIJob ns/pi is restarting")
    assert "; the attempt's logs are kept in ConfigMap pi-attempt-0" in found.summary


def test_a_launcher_that_ran_has_its_container_named() -> None:
    job = base().obj()
    launcher = make_pod(job, "launcher").ready().obj()
    launcher["status"]["containerStatuses"] = [{"name": "mpi-launcher", "state": {}, "lastState": {}}]
    observed = observe(job, [launcher, make_pod(job, "worker", 0).failed(exit_code=1).obj()])
    found = decide(job, observed, at(100)).evidence
    assert found is not None
    assert found.logs[0] == LogSource("pi-launcher", "mpi-launcher",
                                      unreadable="the pod was never scheduled to a node")


MPIRUN_LOST_WORKER_1 = ("ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[51934,0],0] on node "
                        "pi-launcher\n  Remote daemon: [[51934,0],2] on node pi-worker-1\n")


@pytest.mark.parametrize("seen", ["launcher-first", "worker-first", "both"])
def test_the_dead_worker_is_saved_whichever_failure_is_seen_first(seen: str) -> None:
    """mpirun's error names the worker whose daemon it lost; seen before that worker's own failure, the worker
    still looks alive, and its log is saved all the same."""
    job = base().obj()
    launcher = make_pod(job, "launcher")
    worker = make_pod(job, "worker", 1)
    launcher = on(launcher.failed(exit_code=1) if seen != "worker-first" else launcher.started())
    worker = on(worker.failed(exit_code=131) if seen != "launcher-first" else worker.started())
    pods = [launcher, on(make_pod(job, "worker", 0).ready()), worker]
    observed = observe(job, [p.obj() for p in pods])
    observed.log_tails["pi-launcher"] = MPIRUN_LOST_WORKER_1
    found = decide(job, observed, at(100), Settings()).evidence
    assert found is not None
    assert [(s.pod, s.container) for s in found.logs] == [("pi-launcher", "main"), ("pi-worker-1", "main")]


def test_the_final_failure_is_saved_too() -> None:
    job = base(backoff=0).obj()
    found = evidence_of(job, [make_pod(job, "launcher").failed(exit_code=2)])
    assert found is not None
    assert found.summary.startswith("MPIJob ns/pi has failed (backoffLimit 0 reached after 0 restarts)")


@pytest.mark.parametrize(
    ("restarts", "kept", "keep", "drop"),
    [(3, [0, 1, 2], 3, ["pi-attempt-0"]), (3, [2, 0, 1], 1, ["pi-attempt-2", "pi-attempt-1", "pi-attempt-0"]),
     (1, [0], 3, []), (3, [3, 2, 1], 2, ["pi-attempt-1"])],
    ids=["fourth-drops-first", "keep-one", "room-left", "retried-pass-keeps-its-own"],
)
def test_only_the_last_attempts_are_kept(restarts: int, kept: list[int], keep: int, drop: list[str]) -> None:
    job = base(restarts=restarts).obj()
    found = evidence_of(job, [make_pod(job, "worker", 0, restarts).failed(exit_code=1)], kept, keep)
    assert found is not None and found.name == f"pi-attempt-{restarts}"
    assert found.drop == drop


def test_an_old_attempts_failure_seen_again_saves_nothing() -> None:
    job = base(restarts=1).obj()
    job.status.last_failure = None
    pods = [make_pod(job, "worker", 0, 0).failed(exit_code=1), make_pod(job, "launcher", 0, 1).running()]
    observed = Observed(pods=[p.obj() for p in pods])
    assert decide(job, observed, at(100)).evidence is None


def test_the_config_maps_number_is_the_attempts_everywhere() -> None:
    """Restart 1's attempt: its pods' label, its launcher's name, lastFailure.attempt and the ConfigMap all say 1."""
    job = base(restarts=1).obj()
    pods = [make_pod(job, "launcher", 0, 1).failed(exit_code=1), make_pod(job, "worker", 0, 1).ready()]
    observed = observe(job, [p.obj() for p in pods])
    plan = decide(job, observed, at(100))
    assert plan.evidence is not None and plan.status.last_failure is not None
    launcher = observed.pods[0]
    assert (plan.evidence.name, plan.evidence.attempt, plan.status.last_failure.attempt) == ("pi-attempt-1", 1, 1)
    assert (launcher["metadata"]["name"], launcher["metadata"]["labels"]["mpiop.kubeflow.org/attempt"]) == (
        "pi-launcher-1", "1")
    assert plan.evidence.logs[0].pod == "pi-launcher-1"


def test_a_stalled_attempt_saves_every_rank_and_the_last_report() -> None:
    """A stall blames no pod: the launcher's and every worker's log, and the last progress report."""
    report = TrainerStatus(progress_percentage=40, last_updated_time=at(20))
    job = (base().annotation("mpiop.kubeflow.org/progress-deadline-seconds", "30")
           .status(ranks_running_time=at(10), trainer_status=report).obj())
    pods = [make_pod(job, "launcher").running().started().on_node("n1"),
            *(make_pod(job, "worker", i).running().started().on_node("n1") for i in range(3))]
    found = evidence_of(job, pods)
    assert found is not None
    assert [(s.pod, s.container, s.previous) for s in found.logs] == [
        ("pi-launcher", "main", False), ("pi-worker-0", "main", False), ("pi-worker-1", "main", False),
        ("pi-worker-2", "main", False)]
    assert json.loads(found.progress) == {"progressPercentage": 40, "lastUpdatedTime": "2024-05-01T12:00:20Z"}
    assert "no progress for 80s" in found.summary
