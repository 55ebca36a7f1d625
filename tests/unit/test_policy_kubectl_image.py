"""mpiop.policies.kubectl_image: an exec launcher whose kubectl image cannot be pulled says so on the MPIJob
(Running=False, one Warning Event), then fails the job after the grace; never an endless Init:ImagePullBackOff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.trims import trim_pod
from mpiop.decide import decide
from mpiop.desired import launcher_rbac
from mpiop.desired.kubexec import DELIVERY_CONTAINER
from mpiop.desired.settings import Settings
from mpiop.names import LAUNCH_ANNOTATION
from mpiop.plan import Plan
from mpiop.policies.kubectl_image import REASON
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import PodBuilder, make_pod, observe

IMAGE = "registry.example/kubectl:missing"
PULL_ERROR = f'failed to pull and unpack image "{IMAGE}": not found'
SETTINGS = Settings(default_launch="exec", kubectl_image=IMAGE)
GRACE = SETTINGS.kubectl_image_grace_seconds


def base(annotation: str | None = None) -> MPIJobBuilder:
    builder = make_mpijob("pi", "ns").workers(2).condition("Created").status(start_time=at(0))
    return builder.annotation(LAUNCH_ANNOTATION, annotation) if annotation else builder


def decided(job: MPIJob, launcher: PodBuilder, seconds: float, settings: Settings = SETTINGS) -> Plan:
    pods = [launcher.created(at(0)).obj(), *(make_pod(job, "worker", i).running().obj() for i in range(2))]
    observed = observe(job, pods)
    workers = [f"pi-worker-{i}" for i in range(2)]  # the launcher access, as the cache holds it by now
    observed.service_account, observed.role = launcher_rbac.service_account(job), launcher_rbac.role(job, workers)
    observed.role_binding = launcher_rbac.role_binding(job)
    return decide(job, observed, at(seconds), settings)


def unpulled(job: MPIJob, reason: str = "ImagePullBackOff") -> PodBuilder:
    return make_pod(job, "launcher").init_waiting(DELIVERY_CONTAINER, reason, PULL_ERROR)


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"])
def test_an_unpulled_kubectl_image_makes_the_job_wait_saying_so(reason: str) -> None:
    job = base().obj()
    plan = decided(job, unpulled(job, reason), 30)
    running = plan.status.condition("Running")
    assert running is not None
    expected = (f"MPIJob ns/pi waits: the launcher pi-launcher cannot get kubectl: image {IMAGE!r} (the operator's "
                f"--kubectl-image) is not pulled: {reason}: {PULL_ERROR}")
    assert (running.status, running.reason, running.message) == ("False", REASON, expected)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", REASON, expected)]
    assert plan.status.condition("Failed") is None and not plan.pods_to_delete
    assert plan.requeue_after == GRACE - 30  # decided again when the grace ends


def test_the_event_is_sent_once_while_the_job_waits() -> None:
    job = base().obj()
    first = decided(job, unpulled(job, "ErrImagePull"), 30)
    again = base().status(first.status).obj()
    plan = decided(again, unpulled(again, "ImagePullBackOff"), 60)
    assert [e.reason for e in plan.events] == []
    running = plan.status.condition("Running")
    assert running is not None and running.reason == REASON and "ImagePullBackOff" in (running.message or "")


@pytest.mark.parametrize(("grace", "said"), [
    (GRACE, "5 minutes"),  # the default, --kubectl-image-grace-seconds 300
    (60, "1 minute"),
    (90, "90 seconds"),
    (0, "0 seconds"),      # no grace: the first pull failure fails the job
], ids=["default", "one-minute", "seconds", "none"])
def test_still_unpulled_after_the_grace_fails_the_job_and_deletes_its_pods(grace: int, said: str) -> None:
    job = base().obj()
    plan = decided(job, unpulled(job), grace, replace(SETTINGS, kubectl_image_grace_seconds=grace))
    failed = plan.status.condition("Failed")
    assert failed is not None and (failed.status, failed.reason) == ("True", REASON)
    assert failed.message == (f"MPIJob ns/pi has failed: the launcher pi-launcher cannot get kubectl: image "
                              f"{IMAGE!r} (the operator's --kubectl-image) is not pulled: ImagePullBackOff: "
                              f"{PULL_ERROR}; still not pulled after {said} (the operator's "
                              "--kubectl-image-grace-seconds)")
    assert ("Warning", REASON) in [(e.type, e.reason) for e in plan.events]
    assert plan.status.completion_time == at(grace)
    assert {podstate.name(p) for p in plan.pods_to_delete} >= {"pi-worker-0", "pi-worker-1"}


@pytest.mark.parametrize("grace", [31, 90, 3600])
def test_the_job_waits_for_the_grace_it_is_given(grace: int) -> None:
    job = base().obj()
    plan = decided(job, unpulled(job), 30, replace(SETTINGS, kubectl_image_grace_seconds=grace))
    assert plan.status.condition("Failed") is None
    assert plan.requeue_after == grace - 30


@pytest.mark.parametrize(("launcher", "annotation"), [
    ("init-running", None),           # the image is there: kubectl is being copied
    ("main-unpulled", None),          # the user's own image: the kubelet's state says it, not this policy
    ("kubectl-unpulled", "ssh"),      # an SSH job has no kubectl init container of mpiop's
], ids=["pulled", "user-image", "ssh-job"])
def test_nothing_else_is_taken_for_it(launcher: str, annotation: str | None) -> None:
    job = base(annotation).obj()
    pod = make_pod(job, "launcher")
    if launcher == "init-running":
        pod = pod.init_waiting(DELIVERY_CONTAINER, "PodInitializing")
    elif launcher == "main-unpulled":
        pod = pod.init_waiting("main", "ImagePullBackOff", PULL_ERROR)
    else:
        pod = unpulled(job)
    plan = decided(job, pod, GRACE * 2)
    assert plan.status.condition("Failed") is None
    assert REASON not in [e.reason for e in plan.events]
    running = plan.status.condition("Running")
    assert running is None or running.reason != REASON


def test_trimming_keeps_what_the_policy_reads() -> None:
    job = base().obj()
    pod = unpulled(job).obj()
    pod["status"]["initContainerStatuses"][0]["state"]["waiting"]["message"] = "x" * 2000
    trimmed = trim_pod(pod)
    failure = podstate.image_pull_failure(trimmed, DELIVERY_CONTAINER)
    assert failure is not None and failure[0] == "ImagePullBackOff" and failure[1] == "x" * 512
