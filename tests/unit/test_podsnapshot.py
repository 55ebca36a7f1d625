"""mpiop.podsnapshot: a pod's State is what the podstate accessors answer, and a trimmed pod carries it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mpiop import names, podsnapshot, podstate
from mpiop.controller.trims import trim_pod
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi").obj()


def _crash_looping(policy: str) -> dict[str, Any]:
    """A running worker whose container failed once and waits out its back-off."""
    obj: dict[str, Any] = make_pod(JOB, "worker", 0).running().obj()
    obj["spec"] = {"restartPolicy": policy, "nodeName": "n1"}
    obj["status"]["containerStatuses"] = [
        {"name": "main", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]
    return obj


PODS = [
    make_pod(JOB, "worker", 3, attempt=2).ready().obj(),
    make_pod(JOB, "worker", 1).running().obj(),
    make_pod(JOB, "launcher").succeeded().obj(),
    make_pod(JOB, "worker", 0).ready().terminating().obj(),
    make_pod(JOB, "worker", 2).failed().label(names.REPLICA_INDEX_LABEL, "x").label(names.ATTEMPT_LABEL, "y").obj(),
    _crash_looping("OnFailure"),
    _crash_looping("Always"),
    {"metadata": {"name": "bare"}},
]
IDS = ["ready", "running", "launcher-succeeded", "terminating", "garbage-labels", "on-failure", "always", "bare"]


@pytest.mark.parametrize("pod", PODS, ids=IDS)
def test_state_is_what_the_accessors_read(pod: dict[str, Any]) -> None:
    state = podsnapshot.state(pod)
    assert state == (podstate.name(pod), podstate.role(pod), podstate.replica_index(pod), podstate.attempt(pod),
                     podstate.phase(pod), podstate.is_terminating(pod), podstate.is_ready(pod),
                     podstate.in_place_failures(pod))
    assert state.running == podstate.is_running(pod)
    assert state.active == podstate.is_active(pod)


@pytest.mark.parametrize("pod", PODS, ids=IDS)
def test_a_trimmed_pod_carries_the_state_of_the_whole_pod(pod: dict[str, Any]) -> None:
    """The trim keeps every field the State reads, and the cached pod has its State ready."""
    raw = copy.deepcopy(pod)
    raw.setdefault("metadata", {}).setdefault("ownerReferences", [])
    trimmed = trim_pod(raw)
    assert isinstance(trimmed, podsnapshot.TrimmedPod)
    assert podsnapshot.state(trimmed) is trimmed.state
    assert trimmed.state == podsnapshot.read(pod)
