"""Owned-object events that change nothing the cache keeps (a pod bound to a node) enqueue no reconcile."""

from __future__ import annotations

import copy
from typing import Any

from mpiop import podstate
from mpiop.controller.manager import _same_but_version

PENDING: dict[str, Any] = {
    "metadata": {"name": "pi-worker-0", "namespace": "ns", "uid": "u", "resourceVersion": "10",
                 "labels": {"training.kubeflow.org/job-role": "worker"},
                 "ownerReferences": [{"kind": "MPIJob", "name": "pi", "uid": "j", "controller": True}]},
    "spec": {"containers": [{"name": "main"}]},
    "status": {"phase": "Pending", "qosClass": "BestEffort"},
}


def changed(change: dict[str, Any], version: str = "11") -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(PENDING)
    pod["metadata"]["resourceVersion"] = version
    for path, value in change.items():
        *parents, leaf = path.split(".")
        target = pod
        for part in parents:
            target = target[part]
        target[leaf] = value
    return pod


def test_binding_changes_only_the_version_of_the_cached_pod() -> None:
    bound = changed({"spec.nodeName": "node-1", "status.conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert _same_but_version(podstate.trim(PENDING), podstate.trim(bound))


def test_running_and_ready_is_a_change() -> None:
    running = changed({"status.phase": "Running", "status.conditions": [{"type": "Ready", "status": "True"}]})
    assert not _same_but_version(podstate.trim(PENDING), podstate.trim(running))


def test_deletion_is_a_change() -> None:
    going = changed({"metadata.deletionTimestamp": "2024-05-01T12:00:00Z"})
    assert not _same_but_version(podstate.trim(PENDING), podstate.trim(going))
