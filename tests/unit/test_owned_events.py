"""Owned-object updates that change nothing a decision reads (a pod bound to a node) enqueue no reconcile;
every other change of what a kind's trim keeps does, per kind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.controller import trims
from mpiop.controller.caches import (
    Caches,
    same_but_version,
    same_mpijob_but_progress,
    same_pod_but_binding_or_deletion_time,
)
from mpiop.controller.trims import trim_pod
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import KubeClient

OWNER = [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "j", "controller": True}]
PENDING: JSON = {
    "metadata": {"name": "pi-worker-0", "namespace": "ns", "uid": "u", "resourceVersion": "10",
                 "labels": {"training.kubeflow.org/job-role": "worker"}, "ownerReferences": OWNER},
    "spec": {"containers": [{"name": "main"}]},
    "status": {"phase": "Pending", "qosClass": "BestEffort"},
}
POD_GROUP: JSON = {"metadata": {"name": "pi", "namespace": "ns", "uid": "g", "resourceVersion": "10",
                                "ownerReferences": OWNER},
                   "spec": {"minMember": 3, "scheduleTimeoutSeconds": 0}, "status": {"phase": "Pending"}}
CONFIG_MAP: JSON = {"metadata": {"name": "pi-config", "namespace": "ns", "uid": "c", "resourceVersion": "10",
                                 "ownerReferences": OWNER}, "data": {"hostfile": "pi-worker-0 slots=1\n"}}
SERVICE: JSON = {"metadata": {"name": "pi", "namespace": "ns", "uid": "s", "resourceVersion": "10",
                              "ownerReferences": OWNER}, "spec": {"selector": {"app": "pi"}}}


def changed(obj: JSON, change: dict[str, Any], version: str = "11") -> JSON:
    new: JSON = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = version
    for path, value in change.items():
        *parents, leaf = path.split(".")
        target = new
        for part in parents:
            target = target[part]
        target[leaf] = value
    return new


def test_binding_changes_only_the_version_of_the_cached_pod() -> None:
    bound = changed(PENDING, {"spec.nodeName": "node-1",
                              "status.conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert same_pod_but_binding_or_deletion_time(trim_pod(PENDING), trim_pod(bound))


def test_a_later_time_of_a_deletion_already_cached_is_not_news() -> None:
    """The operator's own mark (its clock), then the apiserver's time (grace period), then the kubelet's."""
    marked = changed(PENDING, {"metadata.deletionTimestamp": "2024-05-01T12:00:00Z"})
    graceful = changed(PENDING, {"metadata.deletionTimestamp": "2024-05-01T12:00:30Z"}, version="12")
    forced = changed(PENDING, {"metadata.deletionTimestamp": "2024-05-01T12:00:01Z"}, version="13")
    assert same_pod_but_binding_or_deletion_time(trim_pod(marked), trim_pod(graceful))
    assert same_pod_but_binding_or_deletion_time(trim_pod(graceful), trim_pod(forced))
    failed = changed(graceful, {"status.phase": "Failed"}, version="14")
    assert not same_pod_but_binding_or_deletion_time(trim_pod(graceful), trim_pod(failed))


@pytest.mark.parametrize("change", [
    {"status.phase": "Running", "status.conditions": [{"type": "Ready", "status": "True"}]},
    {"metadata.deletionTimestamp": "2024-05-01T12:00:00Z"},
    {"metadata.labels": {"training.kubeflow.org/job-role": "launcher"}},
], ids=["running-and-ready", "deletion", "labels"])
def test_other_pod_changes_are_news(change: dict[str, Any]) -> None:
    assert not same_pod_but_binding_or_deletion_time(trim_pod(PENDING), trim_pod(changed(PENDING, change)))


@pytest.mark.parametrize(("trim", "obj", "change"), [
    (trims.trim_pod_group, POD_GROUP, {"spec.minMember": 1}),
    (trims.trim_pod_group, POD_GROUP, {"status.phase": "Running"}),
    (trims.trim_config_map, CONFIG_MAP, {"data": {"hostfile": ""}}),
    (trims.trim_service, SERVICE, {"metadata.deletionTimestamp": "2024-05-01T12:00:00Z"}),
    (trims.trim_secret, SERVICE, {"metadata.deletionTimestamp": "2024-05-01T12:00:00Z"}),
], ids=["pod-group-spec", "pod-group-status", "config-map-data", "service-deletion",
        "secret-deletion"])
def test_a_change_of_what_the_trim_keeps_is_news(trim: Any, obj: JSON, change: dict[str, Any]) -> None:
    assert not same_but_version(trim(copy.deepcopy(obj)), trim(changed(obj, change)))


def test_a_new_version_alone_is_not_news() -> None:
    assert same_but_version(trims.trim_pod_group(POD_GROUP), trims.trim_pod_group(changed(POD_GROUP, {})))


def test_every_owned_informer_has_its_filter_and_only_pods_ignore_the_node() -> None:
    client = KubeClient(ClusterAccess("http://127.0.0.1:1"))
    cached = Caches.build(client, "ns", gang_scheduler=GangScheduler("scheduler-plugins-scheduler"))
    filters = dict((informer.resource.kind, unchanged) for informer, unchanged in cached.owned_filters())
    assert len(filters) == len(cached.owned())
    assert filters.pop("Pod") is same_pod_but_binding_or_deletion_time
    assert set(filters.values()) == {same_but_version}
    assert "PodGroup" in filters


REPORTED: JSON = {
    "metadata": {"name": "pi", "namespace": "ns", "uid": "j", "resourceVersion": "10", "generation": 1},
    "spec": {"mpiReplicaSpecs": {}},
    "status": {"conditions": [{"type": "Running", "status": "True"}], "ranksRunningTime": "2026-11-27T02:00:00Z",
               "firstProgressTime": "2026-11-27T02:00:10Z",
               "trainerStatus": {"progressPercentage": 10, "lastUpdatedTime": "2026-11-27T02:00:10Z"}},
}
NEXT_REPORT = {"status.trainerStatus": {"progressPercentage": 11, "lastUpdatedTime": "2026-11-27T02:00:20Z"}}


def test_a_later_progress_report_queues_no_reconcile() -> None:
    assert same_mpijob_but_progress(REPORTED, changed(REPORTED, NEXT_REPORT))


@pytest.mark.parametrize(("old", "change"), [
    (changed(REPORTED, {"status.firstProgressTime": None, "status.trainerStatus": None}), {}),
    (changed(REPORTED, {"status.firstProgressTime": None}), {}),
    (REPORTED, {**NEXT_REPORT, "status.conditions": [{"type": "Running", "status": "False"}]}),
    (REPORTED, {**NEXT_REPORT, "metadata.generation": 2}),
    (REPORTED, {"metadata.annotations": {"mpiop.kubeflow.org/progress-deadline-seconds": "30"}}),
], ids=["the-first-report", "first-progress-not-yet-recorded", "with-a-condition", "with-a-spec-change",
        "an-annotation"])
def test_the_first_report_and_any_other_change_are_news(old: JSON, change: dict[str, Any]) -> None:
    new = changed(REPORTED, change) if change else changed(REPORTED, NEXT_REPORT)
    assert not same_mpijob_but_progress(old, new)
