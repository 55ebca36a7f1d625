"""mpiop.controller.trims.trim_pod: what the pod cache keeps (what `podstate` reads), and the pod builder's fit."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import pytest

from mpiop import podstate
from mpiop.controller.trims import trim_pod
from mpiop.desired import pods
from testkit.mpijobs import make_mpijob
from testkit.pods import PodBuilder, make_pod

JOB = make_mpijob("pi").workers(3).obj()


def worker(index: int = 1, attempt: int = 0) -> PodBuilder:
    return make_pod(JOB, "worker", index, attempt)


def _restarting_pod(policy: str) -> dict[str, Any]:
    """A running worker whose main container failed once and waits out its back-off, beside one that runs."""
    obj: dict[str, Any] = worker(0).running().obj()
    obj["spec"] = {"restartPolicy": policy, "nodeName": "n1"}
    obj["status"]["containerStatuses"] = [
        {"name": "main", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "side", "restartCount": 0, "state": {"running": {"startedAt": "t"}}, "lastState": {}}]
    return obj


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
    assert trim_pod(full) == {
        "metadata": {
            "name": "pi-worker-1",
            "namespace": "default",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": full["metadata"]["labels"],
            "deletionTimestamp": "2024-05-01T12:05:00Z",
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "uid-pi",
                                 "controller": True}],
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
    trimmed = trim_pod(pending)
    assert trimmed["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "message": message}]
    assert podstate.unschedulable_message(trimmed) == message
    assert podstate.unschedulable_message({"metadata": {}, "status": {"phase": "Running"}}) == ""


def test_trim_keeps_a_disruption_and_drops_a_cleared_one() -> None:
    """policies/disruption reads DisruptionTarget=True; one Kubernetes set back to False is not a disruption."""
    message = "Eviction API: evicting " + "x" * 400
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": message,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
    evicted = {"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [condition]}}
    trimmed = trim_pod(evicted)
    assert podstate.disruption(trimmed) == ("EvictionByEvictionAPI", message[:podstate.DISRUPTION_MESSAGE_KEPT])
    condition["status"] = "False"
    assert podstate.disruption(trim_pod(evicted)) is None
    assert "conditions" not in trim_pod(evicted)["status"]


def test_trim_of_a_new_pod() -> None:
    assert trim_pod({"metadata": {"name": "p"}}) == {"metadata": {"name": "p", "ownerReferences": []}, "status": {}}


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
    assert trim_pod(raw) == obj


@pytest.mark.parametrize(("role", "index"), [("worker", 2), ("launcher", 0)], ids=["worker", "launcher"])
def test_builder_pods_match_desired_pods(role: str, index: int) -> None:
    desired = pods.worker_pod(JOB, index, 4) if role == "worker" else pods.launcher_pod(JOB, 4)
    trimmed = trim_pod(desired)
    built = make_pod(JOB, role, index, 4).obj()
    for key in ("name", "namespace", "labels"):
        assert built["metadata"][key] == trimmed["metadata"][key]
    assert built["metadata"]["ownerReferences"] == trimmed["metadata"]["ownerReferences"]




def test_trim_keeps_restarts_and_crash_loop_only() -> None:
    pod = _restarting_pod("OnFailure")
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = "back-off 40s restarting failed container"
    trimmed = trim_pod(pod)
    assert trimmed["spec"] == {"nodeName": "n1", "restartPolicy": "OnFailure"}
    assert trimmed["status"]["containerStatuses"] == [
        {"name": "main", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "side", "state": {}, "lastState": {}},
    ], "the back-off's growing message and a zero restartCount change nothing"
    assert trim_pod(_restarting_pod("Never"))["spec"] == {"nodeName": "n1"}


def test_values_pods_repeat_are_one_string_in_the_cache() -> None:
    """A namespace, the labels, the owner, the node, the phase: at 10,000 pods, one copy each instead of one a pod
    (~1 KB a pod). Each pod here is decoded from its own JSON, as a watch event is."""
    def decoded(index: int) -> dict[str, Any]:
        obj = worker(index).running().obj()
        obj["spec"] = {"nodeName": "node-1"}
        obj["status"]["containerStatuses"] = [{"name": "main", "state": {"running": {}}, "lastState": {}}]
        return cast(dict[str, Any], json.loads(json.dumps(obj)))

    first, second = trim_pod(decoded(0)), trim_pod(decoded(1))
    assert first["metadata"]["name"] != second["metadata"]["name"]
    one, other = first["metadata"], second["metadata"]
    assert one["namespace"] is other["namespace"]
    shared_labels = [key for key in one["labels"] if one["labels"][key] == other["labels"].get(key)]
    assert len(shared_labels) >= 3, one["labels"]
    for key in shared_labels:
        assert one["labels"][key] is other["labels"][key], key
    other_keys = {key: key for key in other["labels"]}
    assert all(other_keys[key] is key for key in one["labels"]), "the label keys too"
    for field in ("kind", "name", "uid"):
        assert one["ownerReferences"][0][field] is other["ownerReferences"][0][field], field
    assert first["spec"]["nodeName"] is second["spec"]["nodeName"]
    assert first["status"]["phase"] is second["status"]["phase"]
    assert first["status"]["containerStatuses"][0]["name"] is second["status"]["containerStatuses"][0]["name"]
    assert first["status"]["conditions"][0]["status"] is second["status"]["conditions"][0]["status"]
