"""mpiop.podstate: reading trimmed pods, failure summaries (and the pod builder's roles)."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop import podstate
from testkit.mpijobs import make_mpijob
from testkit.pods import PodBuilder, make_pod

JOB = make_mpijob("pi").workers(3).obj()


def worker(index: int = 1, attempt: int = 0) -> PodBuilder:
    return make_pod(JOB, "worker", index, attempt)


@pytest.mark.parametrize(
    ("pod", "phase", "active", "running", "ready", "terminating"),
    [
        (worker(), "Pending", True, False, False, False),
        (worker().running(), "Running", True, True, False, False),
        (worker().ready(), "Running", True, True, True, False),
        (worker().ready().terminating(), "Running", False, False, False, True),
        (worker().pending().terminating(), "Pending", False, False, False, True),
        (worker().succeeded(), "Succeeded", False, False, False, False),
        (worker().failed(), "Failed", False, False, False, False),
        (worker().evicted(), "Failed", False, False, False, False),
        (worker().unknown(), "Unknown", True, False, False, False),
    ],
    ids=["pending", "running", "ready", "ready-terminating", "pending-terminating", "succeeded", "failed",
         "evicted", "unknown"],
)
def test_pod_state(pod: PodBuilder, phase: str, active: bool, running: bool, ready: bool,
                   terminating: bool) -> None:
    obj = pod.obj()
    assert podstate.phase(obj) == phase
    assert podstate.is_active(obj) is active
    assert podstate.is_running(obj) is running
    assert podstate.is_ready(obj) is ready
    assert podstate.is_terminating(obj) is terminating


def test_phase_defaults_to_pending() -> None:
    assert podstate.phase({"metadata": {"name": "p"}}) == "Pending"
    assert podstate.phase({"metadata": {"name": "p"}, "status": {}}) == "Pending"


def test_identity() -> None:
    obj = worker(2, 5).obj()
    assert podstate.name(obj) == "pi-worker-2"
    assert podstate.attempt(obj) == 5
    assert podstate.replica_index(obj) == 2
    assert podstate.role(obj) == "worker"
    launcher = make_pod(JOB, "launcher", attempt=1).obj()
    assert podstate.role(launcher) == "launcher"
    assert podstate.attempt(launcher) == 1


@pytest.mark.parametrize(
    ("labels", "attempt", "index", "role"),
    [
        ({}, 0, None, ""),
        ({"mpiop.kubeflow.org/attempt": "x", "training.kubeflow.org/replica-index": "y"}, -1, None, ""),
        ({"mpiop.kubeflow.org/attempt": "3", "training.kubeflow.org/replica-index": "7",
          "training.kubeflow.org/job-role": "worker"}, 3, 7, "worker"),
    ],
    ids=["no-labels", "garbage", "set"],
)
def test_labels_parsing(labels: dict[str, str], attempt: int, index: int | None, role: str) -> None:
    obj = {"metadata": {"name": "p", "labels": labels}}
    assert podstate.attempt(obj) == attempt
    assert podstate.replica_index(obj) == index
    assert podstate.role(obj) == role


@pytest.mark.parametrize(
    ("pod", "summary", "exit_code"),
    [
        (worker(1).failed(reason="OOMKilled", exit_code=137), "pi-worker-1 container main OOMKilled exit 137", 137),
        (worker(0).failed("mpi", "Error", 2), "pi-worker-0 container mpi Error exit 2", 2),
        (make_pod(JOB, "launcher").failed(exit_code=1), "pi-launcher container main Error exit 1", 1),
        (worker(0).evicted("The node was low on resource: memory."),
         "pi-worker-0 Evicted: The node was low on resource: memory.", None),
        (worker(0).evicted(""), "pi-worker-0 Evicted", None),
        (worker(2).phase("Failed"), "pi-worker-2 Failed", None),
    ],
    ids=["oomkilled", "named-container", "launcher", "evicted", "evicted-no-message", "bare-failed"],
)
def test_failure_summary(pod: PodBuilder, summary: str, exit_code: int | None) -> None:
    obj = pod.obj()
    assert podstate.failure_summary(obj) == summary
    assert podstate.exit_code(obj) == exit_code


def test_container_failure_first_nonzero_and_last_state() -> None:
    obj: dict[str, Any] = worker(0).phase("Failed").obj()
    obj["status"]["containerStatuses"] = [
        {"name": "ok", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "restarted", "state": {}, "lastState": {"terminated": {"exitCode": 139}}},
        {"name": "later", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
    ]
    found = podstate.container_failure(obj)
    assert found is not None and (found.container, found.reason, found.exit_code) == ("restarted", "Error", 139)
    assert podstate.failure_summary(obj) == "pi-worker-0 container restarted Error exit 139"


def test_make_pod_rejects_unknown_role() -> None:
    with pytest.raises(ValueError, match="role"):
        make_pod(JOB, "Worker")


def _container(restarts: int, state: dict[str, Any], last_exit: int | None = None) -> dict[str, Any]:
    last = {"terminated": {"exitCode": last_exit, "reason": "Error"}} if last_exit is not None else {}
    return {"name": "main", "restartCount": restarts, "state": state, "lastState": last}


RUNNING: dict[str, Any] = {"running": {"startedAt": "t"}}
CRASH_LOOP: dict[str, Any] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}


@pytest.mark.parametrize(
    ("status", "failures"),
    [
        (_container(0, RUNNING), 0),
        (_container(0, {"terminated": {"exitCode": 0, "reason": "Completed"}}), 0),
        (_container(0, {"terminated": {"exitCode": 1, "reason": "Error"}}), 1),  # failed, not yet restarted
        (_container(1, RUNNING, last_exit=1), 1),  # restarted at once after its first failure
        (_container(1, CRASH_LOOP, last_exit=1), 2),  # failed again, waits out the back-off
        (_container(5, CRASH_LOOP, last_exit=137), 6),
        (_container(2, {"waiting": {"reason": "ContainerCreating"}}, last_exit=1), 2),  # the next run is made
        (_container(3, {"terminated": {"exitCode": 2, "reason": "Error"}}, last_exit=1), 4),
    ],
    ids=["running", "completed", "just-failed", "rerunning", "crash-loop", "crash-loop-6", "creating", "failed-again"],
)
def test_container_failures_count_each_failed_run_once(status: dict[str, Any], failures: int) -> None:
    assert podstate.container_failures(status) == failures


def _restarting_pod(policy: str | None, *, init_restarts: int = 0) -> dict[str, Any]:
    obj: dict[str, Any] = worker(0).running().obj()
    if policy is not None:
        obj["spec"] = {"restartPolicy": policy, "nodeName": "n1"}
    obj["status"]["containerStatuses"] = [_container(1, CRASH_LOOP, last_exit=1),
                                          {**_container(0, RUNNING), "name": "side"}]
    if init_restarts:
        obj["status"]["initContainerStatuses"] = [
            {**_container(init_restarts, RUNNING, last_exit=3), "name": "init"}]
    return obj


@pytest.mark.parametrize(
    ("pod", "failures"),
    [
        (_restarting_pod("OnFailure"), 2),
        (_restarting_pod("OnFailure", init_restarts=2), 4),  # init containers count too, as a Job counts them
        (_restarting_pod("Always"), 0),  # restarted whatever its exit: not a failure count
        (_restarting_pod("Never"), 0),
        (_restarting_pod(None), 0),  # the apiserver's default is Always
    ],
    ids=["on-failure", "on-failure-init", "always", "never", "unset"],
)
def test_in_place_failures_only_under_on_failure(pod: dict[str, Any], failures: int) -> None:
    assert podstate.in_place_failures(pod) == failures


def test_container_failure_reads_init_containers_first() -> None:
    pod = _restarting_pod("OnFailure", init_restarts=1)
    found = podstate.container_failure(pod)
    assert found is not None
    assert (found.container, found.exit_code, found.previous) == ("init", 3, True)
