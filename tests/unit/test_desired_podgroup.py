"""PodGroups against kubeflow/mpi-operator's own expectations (pkg/controller/podgroup_test.go), and quantities."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import LAUNCHER, WORKER
from mpiop.desired import podgroup
from mpiop.desired.podgroup import GangScheduler, gang_scheduler
from mpiop.desired.quantity import Quantity
from testkit.mpijobs import MPIJobBuilder, make_mpijob

VOLCANO = GangScheduler("volcano")
PLUGINS = GangScheduler("scheduler-plugins-scheduler")
KUBEFLOW_MIN_RESOURCES = {"cpu": "100", "memory": "512Gi", "example.com/gpu": "40"}


def _requests(job: MPIJobBuilder, replica: Any, **requests: str) -> MPIJobBuilder:
    for name, value in requests.items():
        job.request(replica, name, value)
    return job


def kubeflow_job(workers: int = 2) -> MPIJobBuilder:
    """kubeflow's TestNewPodGroup job: launcher 1 cpu/2Gi, workers 10 cpu/20Gi, queue annotation project-x."""
    job = make_mpijob("test").workers(workers).annotation(podgroup.VOLCANO_QUEUE_ANNOTATION, "project-x")
    _requests(job, LAUNCHER, cpu="1", memory="2Gi")
    return _requests(job, WORKER, cpu="10", memory="20Gi")


@pytest.mark.parametrize(("name", "job", "volcano_spec", "plugins_spec"), [
    ("all schedulingPolicy fields are set",
     kubeflow_job(1000).scheduling_policy(minAvailable=2, queue="project-y", priorityClass="high",
                                          minResources=KUBEFLOW_MIN_RESOURCES, scheduleTimeoutSeconds=100),
     {"minMember": 2, "queue": "project-y", "priorityClassName": "high", "minResources": KUBEFLOW_MIN_RESOURCES},
     {"minMember": 2, "scheduleTimeoutSeconds": 100, "minResources": KUBEFLOW_MIN_RESOURCES}),
    ("schedulingPolicy is nil",
     kubeflow_job(2).pod_spec(LAUNCHER, priorityClassName="high"),
     {"minMember": 3, "queue": "project-x", "priorityClassName": "high",
      "minResources": {"cpu": "21", "memory": "42Gi"}},
     {"minMember": 3, "scheduleTimeoutSeconds": 0, "minResources": {"cpu": "21", "memory": "42Gi"}}),
])
def test_pod_group_as_kubeflow_builds_it(name: str, job: MPIJobBuilder, volcano_spec: dict[str, Any],
                                         plugins_spec: dict[str, Any]) -> None:
    built = job.obj()
    volcano = podgroup.pod_group(built, VOLCANO)
    plugins = podgroup.pod_group(built, PLUGINS)
    assert (volcano["apiVersion"], volcano["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert (plugins["apiVersion"], plugins["kind"]) == ("scheduling.x-k8s.io/v1alpha1", "PodGroup")
    assert volcano["spec"] == volcano_spec
    assert plugins["spec"] == plugins_spec
    for group in (volcano, plugins):
        assert group["metadata"]["name"] == "test"
        assert group["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
        assert group["metadata"]["ownerReferences"][0]["controller"] is True


@pytest.mark.parametrize(("name", "job", "want"), [
    # kubeflow's TestCalculatePGMinResources cases for scheduler-plugins.
    ("without priorityClass: everything counted",
     _requests(_requests(make_mpijob("t").workers(2), LAUNCHER, cpu="2", memory="1Gi"), WORKER, cpu="10",
               memory="32Gi").container(WORKER, name="main").pod_spec(WORKER, containers=[
                   {"name": "a", "resources": {"requests": {"cpu": "10", "memory": "32Gi"}}},
                   {"name": "b", "resources": {"requests": {"cpu": "50", "memory": "512Gi"}}}]),
     {"cpu": "122", "memory": "1089Gi"}),
    ("minAvailable 2 of 3: the launcher and one worker",
     _requests(_requests(make_mpijob("t").workers(2), LAUNCHER, cpu="2", memory="2Gi"), WORKER, cpu="5",
               memory="16Gi").scheduling_policy(minAvailable=2),
     {"cpu": "7", "memory": "18Gi"}),
    ("minAvailable 2 of 101, launcher of higher priority: the same",
     _requests(_requests(make_mpijob("t").workers(100), LAUNCHER, cpu="2", memory="4Gi"), WORKER, cpu="20",
               memory="64Gi").scheduling_policy(minAvailable=2).pod_spec(LAUNCHER, priorityClassName="high"),
     {"cpu": "22", "memory": "68Gi"}),
    ("minAvailable 0: none", make_mpijob("t").scheduling_policy(minAvailable=0), None),
    # addResources: a limit stands in for a missing request, a request wins over its limit.
    ("limits fill in requests",
     make_mpijob("t").workers(1).without(LAUNCHER).request(WORKER, "cpu", "10").request(WORKER, "memory", "16Gi")
     .limit(WORKER, "example.com/gpu", 8).limit(WORKER, "cpu", "20").limit(WORKER, "memory", "32Gi"),
     {"cpu": "10", "example.com/gpu": "8", "memory": "16Gi"}),
    ("canonical sums", make_mpijob("t").workers(4).request(WORKER, "cpu", "500m").request(WORKER, "memory", "1.5Gi")
     .gpus(4), {"cpu": "2", "memory": "6Gi", "nvidia.com/gpu": "16"}),
])
def test_min_resources(name: str, job: MPIJobBuilder, want: dict[str, str] | None) -> None:
    assert podgroup.min_resources(job.obj()) == want


def test_min_member_is_every_worker_and_the_launcher_unless_given() -> None:
    assert podgroup.min_member(make_mpijob("t").workers(99).obj()) == 100
    assert podgroup.min_member(make_mpijob("t").workers(1000).scheduling_policy(minAvailable=2).obj()) == 2
    assert podgroup.min_member(make_mpijob("t").workers(0).obj()) == 1


def test_wait_for_workers_ready_leaves_the_launcher_out_of_the_gang() -> None:
    """kubeflow #608: the launcher waits for Ready workers, so a gang counting it would wait forever."""
    job = _requests(make_mpijob("t").workers(4).wait_for_workers_ready().gpus(4), LAUNCHER, cpu="1")
    assert podgroup.min_member(job.obj()) == 4
    assert podgroup.min_resources(job.obj()) == {"nvidia.com/gpu": "16"}
    assert podgroup.min_member_warning(job.obj()) is None

    lowered = job.scheduling_policy(minAvailable=5).obj()
    assert podgroup.min_member(lowered) == 4
    warning = podgroup.min_member_warning(lowered)
    assert warning is not None and "minAvailable 5" in warning and "asks for 4" in warning

    assert podgroup.min_member(make_mpijob("t").workers(4).wait_for_workers_ready()
                               .scheduling_policy(minAvailable=3).obj()) == 3
    assert podgroup.min_member(make_mpijob("t").workers(0).wait_for_workers_ready().obj()) == 1


@pytest.mark.parametrize(("replicas", "want"), [
    ({"launcher": "high", "worker": "low"}, "high"),
    ({"launcher": "", "worker": "low"}, "low"),
    ({"launcher": "", "worker": ""}, ""),
])
def test_priority_class_from_the_templates(replicas: dict[str, str], want: str) -> None:
    job = make_mpijob("t")
    for replica, name in ((LAUNCHER, replicas["launcher"]), (WORKER, replicas["worker"])):
        if name:
            job.pod_spec(replica, priorityClassName=name)
    assert podgroup.priority_class(job.obj()) == want
    assert podgroup.priority_class(job.scheduling_policy(priorityClass="policy").obj()) == "policy"


def test_volcano_queue_defaults_to_the_one_volcano_defaults_to() -> None:
    assert podgroup.pod_group_spec(make_mpijob("t").obj(), VOLCANO)["queue"] == "default"


def test_join_pod_as_kubeflow_decorates_the_template() -> None:
    job = make_mpijob("test-mpijob").obj()
    for scheduler, want_labels, want_annotations in (
        (VOLCANO, {}, {"scheduling.k8s.io/group-name": "test-mpijob"}),
        (PLUGINS, {"scheduling.x-k8s.io/pod-group": "test-mpijob"}, {}),
    ):
        pod: dict[str, Any] = {"metadata": {"labels": {}}, "spec": {"schedulerName": "default-scheduler"}}
        podgroup.join_pod(pod, job, scheduler, 0)
        assert pod["spec"]["schedulerName"] == scheduler.scheduler_name
        assert pod["metadata"]["labels"] == want_labels
        assert pod["metadata"].get("annotations", {}) == want_annotations


def test_spec_patch_only_when_an_owned_field_differs() -> None:
    wanted = podgroup.pod_group_spec(make_mpijob("t").workers(2).obj(), PLUGINS)
    stored = {"spec": {**wanted, "somethingElse": 1}, "status": {"phase": "Running"}}
    assert podgroup.spec_patch(PLUGINS, wanted, stored) is None
    scaled = podgroup.pod_group_spec(make_mpijob("t").workers(4).obj(), PLUGINS)
    assert podgroup.spec_patch(PLUGINS, scaled, stored) == {"spec": {"minMember": 5}}
    given = {**wanted, "minResources": {"cpu": "1"}}
    assert podgroup.spec_patch(PLUGINS, wanted, {"spec": given}) == {"spec": {"minResources": None}}


def test_gang_scheduler_flag() -> None:
    assert gang_scheduler("") is None
    assert gang_scheduler(None) is None
    volcano = gang_scheduler("volcano")
    assert volcano is not None and volcano.volcano and volcano.crd_name == "podgroups.scheduling.volcano.sh"
    plugins = gang_scheduler("scheduler-plugins-scheduler")
    assert plugins is not None and not plugins.volcano and plugins.crd_name == "podgroups.scheduling.x-k8s.io"


def test_bad_quantity_names_the_field() -> None:
    job = make_mpijob("t").scheduling_policy(minResources={"cpu": "lots"}).obj()
    with pytest.raises(ValueError, match=r"spec.runPolicy.schedulingPolicy.minResources\[cpu\]: 'lots'"):
        podgroup.min_resources(job)


@pytest.mark.parametrize(("given", "canonical"), [
    ("1", "1"), ("1000m", "1"), ("1500m", "1500m"), ("0.5", "500m"), ("2000", "2k"), ("1200", "1200"),
    ("1.5Gi", "1536Mi"), ("1024Mi", "1Gi"), ("512Gi", "512Gi"), ("1000Ki", "1000Ki"), ("100Ki", "100Ki"),
    ("1G", "1G"), ("12e6", "12e6"), ("0.1m", "100u"), ("0.1n", "1n"), (16, "16"), ("0", "0"), ("1e3", "1e3"),
    ("5n", "5n"),
])
def test_quantity_canonical_form(given: str | int, canonical: str) -> None:
    assert str(Quantity.parse(given)) == canonical


def test_quantity_arithmetic_as_go() -> None:
    assert str(Quantity.parse("500m") * 4) == "2"
    assert str(Quantity.parse("1Gi") * 4 + Quantity.parse("512Mi")) == "4608Mi"
    assert str(Quantity.parse("0") + Quantity.parse("1Gi")) == "1Gi"  # a zero sum takes the other's format
    assert str(Quantity.parse("100") + Quantity.parse("1Ki")) == "1124"  # the first term's format wins
