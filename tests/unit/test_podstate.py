"""mpiop.podstate: reading trimmed pods, failure summaries, and `trim` itself (and the pod builder's fit)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mpiop import names, podstate
from mpiop.desired import pods
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


def test_failed_container_first_nonzero_and_last_state() -> None:
    obj: dict[str, Any] = worker(0).phase("Failed").obj()
    obj["status"]["containerStatuses"] = [
        {"name": "ok", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "restarted", "state": {}, "lastState": {"terminated": {"exitCode": 139}}},
        {"name": "later", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
    ]
    assert podstate.failed_container(obj) == ("restarted", "Error", 139)
    assert podstate.failure_summary(obj) == "pi-worker-0 container restarted Error exit 139"


def test_trim_keeps_only_what_decisions_need() -> None:
    full = pods.worker_pod(JOB, 1, 2)
    full["metadata"].update(uid="u-1", resourceVersion="42", creationTimestamp="2024-05-01T12:00:00Z",
                            deletionTimestamp="2024-05-01T12:05:00Z", annotations={"a": "b"},
                            managedFields=[{"manager": "kubelet"}])
    full["metadata"]["ownerReferences"].append({"kind": "Other", "name": "x", "uid": "y"})
    full["status"] = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "low memory",
        "hostIP": "10.0.0.1",
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "t"}],
        "containerStatuses": [
            {"name": "main", "image": "img", "restartCount": 0,
             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "t"}},
             "lastState": {}},
            {"name": "side", "state": {"running": {"startedAt": "t"}}, "lastState": {}},
        ],
    }
    assert podstate.trim(full) == {
        "metadata": {
            "name": "pi-worker-1",
            "namespace": "default",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": full["metadata"]["labels"],
            "deletionTimestamp": "2024-05-01T12:05:00Z",
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "ownerReferences": [{"kind": "MPIJob", "name": "pi", "uid": "uid-pi", "controller": True}],
        },
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low memory",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                 "lastState": {}},
                {"name": "side", "state": {}, "lastState": {}},
            ],
        },
    }


def test_trim_keeps_why_a_pod_is_unschedulable() -> None:
    """A host-port conflict is read from the scheduler's message (desired.hostnetwork)."""
    message = "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    pending = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
         "lastProbeTime": None}]}}
    trimmed = podstate.trim(pending)
    assert trimmed["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "message": message}]
    assert podstate.unschedulable_message(trimmed) == message
    assert podstate.unschedulable_message({"metadata": {}, "status": {"phase": "Running"}}) == ""


def test_trim_keeps_a_disruption_and_drops_a_cleared_one() -> None:
    """policies/disruption reads DisruptionTarget=True; one Kubernetes set back to False is not a disruption."""
    message = "Eviction API: evicting " + "x" * 400
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": message,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    evicted = {"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [condition]}}
    trimmed = podstate.trim(evicted)
    assert podstate.disruption(trimmed) == ("EvictionByEvictionAPI", message[:podstate.DISRUPTION_MESSAGE_KEPT])
    condition["status"] = "False"
    assert podstate.disruption(podstate.trim(evicted)) is None
    assert "conditions" not in podstate.trim(evicted)["status"]


def test_trim_of_a_new_pod() -> None:
    assert podstate.trim({"metadata": {"name": "p"}}) == {"metadata": {"name": "p", "ownerReferences": []},
                                                          "status": {}}


@pytest.mark.parametrize(
    "pod",
    [worker(), worker().running(), worker().ready().terminating(), worker().succeeded(),
     worker().failed(reason="OOMKilled", exit_code=137), worker().evicted(), make_pod(JOB, "launcher", 0, 3),
     worker().unschedulable(), worker().running().disrupted().terminating()],
    ids=["pending", "running", "ready-terminating", "succeeded", "failed", "evicted", "launcher", "unschedulable",
         "disrupted"],
)
def test_builder_pods_are_trimmed(pod: PodBuilder) -> None:
    """make_pod(...).obj() is in the cache's shape: trimming it (as the raw pod, whose owner reference says
    controller: true) changes nothing."""
    obj = pod.obj()
    raw = copy.deepcopy(obj)
    raw["metadata"]["ownerReferences"][0]["controller"] = True
    assert podstate.trim(raw) == obj


@pytest.mark.parametrize(("role", "index"), [("worker", 2), ("launcher", 0)], ids=["worker", "launcher"])
def test_builder_pods_match_desired_pods(role: str, index: int) -> None:
    desired = pods.worker_pod(JOB, index, 4) if role == "worker" else pods.launcher_pod(JOB, 4)
    trimmed = podstate.trim(desired)
    built = make_pod(JOB, role, index, 4).obj()
    for key in ("name", "namespace", "labels"):
        assert built["metadata"][key] == trimmed["metadata"][key]
    assert built["metadata"]["ownerReferences"] == trimmed["metadata"]["ownerReferences"]


def test_make_pod_rejects_unknown_role() -> None:
    with pytest.raises(ValueError, match="role"):
        make_pod(JOB, "Worker")


def test_state_reads_what_the_single_functions_read() -> None:
    """podstate.state is the one-pass form of name/role/replica_index/attempt/phase/is_terminating/is_ready."""
    job = make_mpijob("pi").obj()
    pods = [
        make_pod(job, "worker", 3, attempt=2).ready().obj(),
        make_pod(job, "worker", 1).running().obj(),
        make_pod(job, "launcher").succeeded().obj(),
        make_pod(job, "worker", 0).ready().terminating().obj(),
        make_pod(job, "worker", 2).failed().label(names.REPLICA_INDEX_LABEL, "x").label(names.ATTEMPT_LABEL, "y").obj(),
        {"metadata": {"name": "bare"}},
    ]
    for pod in pods:
        state = podstate.state(pod)
        assert state == (podstate.name(pod), podstate.role(pod), podstate.replica_index(pod), podstate.attempt(pod),
                         podstate.phase(pod), podstate.is_terminating(pod), podstate.is_ready(pod),
                         podstate.in_place_failures(pod))
        assert state.running == podstate.is_running(pod)
        assert state.active == podstate.is_active(pod)


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
    assert podstate.state(podstate.trim(pod)).in_place_failures == failures, "the trimmed pod keeps what it needs"


def test_trim_keeps_restarts_and_crash_loop_only() -> None:
    pod = _restarting_pod("OnFailure")
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = "back-off 40s restarting failed container"
    trimmed = podstate.trim(pod)
    assert trimmed["spec"] == {"nodeName": "n1", "restartPolicy": "OnFailure"}
    assert trimmed["status"]["containerStatuses"] == [
        {"name": "main", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "side", "state": {}, "lastState": {}},
    ], "the back-off's growing message and a zero restartCount change nothing"
    assert podstate.trim(_restarting_pod("Never"))["spec"] == {"nodeName": "n1"}


def test_container_failure_reads_init_containers_first() -> None:
    pod = _restarting_pod("OnFailure", init_restarts=1)
    found = podstate.container_failure(pod)
    assert found is not None
    assert (found.container, found.exit_code, found.previous) == ("init", 3, True)
