"""mpiop.serving.status_endpoint's checks: whose pod may report for which job, and what a body may say."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import cast

import pytest
from structlog.testing import capture_logs

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import TrainerStatus
from mpiop.kube.client import ApiError, KubeClient, Resource
from mpiop.server import EveryMinute
from mpiop.serving.status_endpoint import (
    OwnPod,
    PostRefusedError,
    Reviewer,
    StatusWriter,
    check_path,
    check_reporter,
    log_refusal,
    parse_report,
)
from testkit.mpijobs import at, make_mpijob
from testkit.waits import until

JOB = make_mpijob("pa", "ns").uid("job-uid").workers(2).json()
RESTARTED = make_mpijob("pa", "ns").uid("job-uid").workers(2).status(restart_count=2).json()
WHO = Reviewer("ns", "pa-worker-0", "pod-uid")
WORKER_LABELS = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "pa",
                 "training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "0"}
LAUNCHER_LABELS = {**WORKER_LABELS, "training.kubeflow.org/job-role": "launcher"}


def pod(uid: str = "pod-uid", owner: str = "job-uid", name: str = "pa-worker-0",
        labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid,
                         "labels": WORKER_LABELS if labels is None else labels,
                         "ownerReferences": [{"kind": "MPIJob", "name": "pa", "uid": owner, "controller": True}]}}


@pytest.mark.parametrize(("job", "name", "labels"), [
    (JOB, "pa-worker-0", WORKER_LABELS),
    (JOB, "pa-worker-1", WORKER_LABELS),
    (JOB, "pa-launcher", LAUNCHER_LABELS),
    (RESTARTED, "pa-launcher-2", LAUNCHER_LABELS),
], ids=["worker-0", "last-worker", "launcher", "restarted-launcher"])
def test_the_jobs_own_pod_may_report(job: dict[str, object], name: str, labels: dict[str, str]) -> None:
    found = pod(name=name, labels=labels)
    assert check_reporter(job, found, "ns", "pa", Reviewer("ns", name, "pod-uid")).metadata.name == "pa"


@pytest.mark.parametrize(("job", "name", "labels"), [
    (JOB, "pa-worker-2", WORKER_LABELS),  # beyond the job's 2 replicas
    (JOB, "pa-worker-00", WORKER_LABELS),
    (JOB, "reporter", WORKER_LABELS),
    (JOB, "pa-worker-0", {}),
    (JOB, "pa-worker-0", {**WORKER_LABELS, "training.kubeflow.org/job-name": "pb"}),
    (JOB, "pa-worker-0", LAUNCHER_LABELS),  # a worker's name with the launcher's role
    (RESTARTED, "pa-launcher", LAUNCHER_LABELS),  # the first attempt's launcher, kept for its log
], ids=["worker-beyond-replicas", "padded-index", "another-name", "no-labels", "another-jobs-label", "wrong-role",
        "old-attempts-launcher"])
def test_a_pod_with_a_forged_controller_reference_is_refused(job: dict[str, object], name: str,
                                                             labels: dict[str, str]) -> None:
    """Anyone who may create pods in the namespace can name the job as a pod's controller: the pod must also have a
    name and labels of the job's own pods, so it cannot post the job's progress (and hide a hung job)."""
    with pytest.raises(PostRefusedError) as refused:
        check_reporter(job, pod(name=name, labels=labels), "ns", "pa", Reviewer("ns", name, "pod-uid"))
    assert (refused.value.code, refused.value.reason) == (403, "not_its_pod")
    assert f"pod ns/{name} names MPIJob ns/pa as its controller" in refused.value.message


@pytest.mark.parametrize(
    ("job", "found", "who", "code", "reason"),
    [
        (None, pod(), WHO, 404, "no_job"),
        (JOB, pod(owner="other-job"), WHO, 403, "other_job"),
        (JOB, pod(uid="an-older-pod-of-that-name"), WHO, 403, "other_job"),
        (JOB, None, WHO, 403, "other_job"),
        (JOB, pod(), Reviewer("other-ns", "pa-worker-0", "pod-uid"), 403, "other_job"),
        (None, pod(), Reviewer("other-ns", "pa-worker-0", "pod-uid"), 403, "other_job"),
        (make_mpijob("pa", "ns").uid("job-uid").annotation("mpiop.kubeflow.org/report-progress", "false").json(),
         pod(), WHO, 403, "opted_out"),
    ],
    ids=["no-job", "another-jobs-pod", "recreated-pod", "pod-gone", "other-namespace", "other-namespace-no-job",
         "opted-out"],
)
def test_refused_reporters(job: dict[str, object] | None, found: dict[str, object] | None, who: Reviewer, code: int,
                           reason: str) -> None:
    with pytest.raises(PostRefusedError) as refused:
        check_reporter(job, found, "ns", "pa", who)
    assert (refused.value.code, refused.value.reason) == (code, reason)


NOW = at(100)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b"{", 400, "the body is not JSON"),
        (b"[]", 400, 'the body must be {"trainerStatus": {...}}'),
        (b'{"progressPercentage": 3}', 400, 'the body must be {"trainerStatus": {...}}'),
        (b'{"trainerStatus": {"progressPercentage": -1}}', 422,
         "trainerStatus.progressPercentage: Input should be greater than or equal to 0"),
        (b'{"trainerStatus": {"progressPercentage": 101}}', 422,
         "trainerStatus.progressPercentage: Input should be less than or equal to 100"),
        (b'{"trainerStatus": {"estimatedRemainingSeconds": -5}}', 422,
         "trainerStatus.estimatedRemainingSeconds: Input should be greater than or equal to 0"),
        (b'{"trainerStatus": {"metrics": [{"name": "", "value": "1"}]}}', 422, "trainerStatus.metrics.0.name: String "
                                                                                "should have at least 1 character"),
        (json.dumps({"trainerStatus": {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(33)]}}).encode(),
         422, "trainerStatus.metrics: List should have at most 32 items"),
        (b'{"trainerStatus": {"lastUpdatedTime": "yesterday"}}', 422, "trainerStatus.lastUpdatedTime: Input should be"),
        (json.dumps({"trainerStatus": {"metrics": [{"name": "loss", "value": "1"},
                                                   {"name": "\x1b[2Jloss", "value": "1"}]}}).encode(), 422,
         "trainerStatus.metrics.1.name: holds U+001B, a control character or a format character"),
        (json.dumps({"trainerStatus": {"metrics": [{"name": "loss", "value": "0.3\u202e"}]}}).encode(), 422,
         "trainerStatus.metrics.0.value: holds U+202E"),
        (json.dumps({"trainerStatus": {"metrics": [{"name": "loss", "value": "0.3\n"}]}}).encode(), 422,
         "trainerStatus.metrics.0.value: holds U+000A"),
    ],
    ids=["not-json", "not-object", "not-wrapped", "negative", "over-100", "negative-eta", "empty-metric-name",
         "too-many-metrics", "bad-time", "escape-in-name", "bidi-override-in-value", "newline-in-value"],
)
def test_bad_bodies(body: bytes, code: int, message: str) -> None:
    with pytest.raises(PostRefusedError) as refused:
        parse_report(body, NOW)
    assert refused.value.code == code
    assert refused.value.message.startswith(message), refused.value.message


@pytest.mark.parametrize(
    ("sent", "stamped"),
    [(None, NOW), ("2024-05-01T12:00:50Z", at(50)), ("2030-01-01T00:00:00Z", NOW)],
    ids=["missing-now", "past-kept", "future-now"],
)
def test_last_updated_time(sent: str | None, stamped: dt.datetime) -> None:
    report: dict[str, object] = {"progressPercentage": 40, "metrics": [{"name": "loss", "value": "0.3"}]}
    if sent is not None:
        report["lastUpdatedTime"] = sent
    parsed = parse_report(json.dumps({"trainerStatus": report}).encode(), NOW)
    assert (parsed.progress_percentage, parsed.last_updated_time) == (40, stamped)


class HeldPatches:
    """KubeClient.patch for the writer alone: every write is held until released, and those in flight counted."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.all_written = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.written: list[tuple[str, int]] = []
        self.release = asyncio.Event()

    async def patch(self, resource: Resource, namespace: str, name: str, body: JSON, subresource: str = "") -> JSON:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.release.wait()
        self.in_flight -= 1
        self.written.append((name, body["status"]["trainerStatus"]["progressPercentage"]))
        if len(self.written) == self.expected:
            self.all_written.set()
        return {}


async def test_progress_writes_wait_for_a_slot_and_then_write_the_newest_report() -> None:
    """At most `in_flight` progress writes at once, so reconcile writes never queue behind a thousand of them; a
    job that waits for its slot writes the report it has by then, not the one it had when it began waiting."""
    client = HeldPatches(expected=6)
    writer = StatusWriter(cast(KubeClient, client), interval=0.0, in_flight=2)
    for index in range(6):
        writer.offer("ns", f"job-{index}", TrainerStatus(progress_percentage=1))
    await until(lambda: client.in_flight >= 2, "two writes in flight")
    assert client.in_flight == 2
    writer.offer("ns", "job-5", TrainerStatus(progress_percentage=50))
    client.release.set()
    async with asyncio.timeout(5):
        await client.all_written.wait()
    await writer.close()
    assert client.most_in_flight == 2
    assert sorted(client.written) == [("job-0", 1), ("job-1", 1), ("job-2", 1), ("job-3", 1), ("job-4", 1),
                                      ("job-5", 50)]


@pytest.mark.parametrize(("env", "found"), [
    ({"POD_NAME": "mpiop-7d9c-x2", "POD_NAMESPACE": "mpiop-system"}, OwnPod("mpiop-system", "mpiop-7d9c-x2")),
    ({"POD_NAME": "mpiop-7d9c-x2"}, None),  # a process outside a pod (make run) labels nothing
    ({"POD_NAMESPACE": "mpiop-system", "POD_NAME": ""}, None),
    ({}, None),
])
def test_own_pod_from_the_downward_api(env: dict[str, str], found: OwnPod | None) -> None:
    assert OwnPod.from_env(env) == found


@pytest.mark.parametrize(("status", "forbidden"), [(403, True), (401, False), (404, False)])
def test_api_error_forbidden(status: int, forbidden: bool) -> None:
    """What OwnPod.mark and the CA's Secret ask of a refusal: a 403 is RBAC's, and the log says what to grant."""
    assert ApiError(status, {"reason": "Forbidden"}, "PATCH", "/api/v1/namespaces/x/pods/y").forbidden is forbidden


@pytest.mark.parametrize(("namespace", "name", "segment"), [
    ("NS", "pa", "namespace"),
    ("ns\x1b[31m", "pa", "namespace"),
    ("n" * 64, "pa", "namespace"),
    ("ns", "pa\nINFO forged line", "mpijobs name"),
    ("ns", "-pa", "mpijobs name"),
    ("ns", "p" * 254, "mpijobs name"),
], ids=["upper-case", "escape", "too-long-namespace", "newline", "leading-dash", "too-long-name"])
def test_a_path_that_names_no_job_is_refused(namespace: str, name: str, segment: str) -> None:
    """Checked before anything is looked up or logged: the console log printed the job's name from the URL as sent."""
    with pytest.raises(PostRefusedError) as refused:
        check_path(namespace, name)
    assert (refused.value.code, refused.value.reason) == (400, "bad_path")
    assert f"the path's {segment} segment" in refused.value.message


def test_a_jobs_own_path_is_fine() -> None:
    check_path("team-a", "pi.v2")
    check_path("a" * 63, "p" * 253)


class Patches:
    """KubeClient.patch for the writer: each write noted, the job named `gone` answered 404."""

    def __init__(self) -> None:
        self.written: list[str] = []

    async def patch(self, resource: Resource, namespace: str, name: str, body: JSON, subresource: str = "") -> JSON:
        self.written.append(name)
        if name == "gone":
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", f"/mpijobs/{name}/status")
        return {}


async def test_the_writer_forgets_a_job_once_its_interval_passes_or_it_is_gone() -> None:
    """It kept every job that ever reported (the time of its last write) until a write was answered 404."""
    client = Patches()
    writer = StatusWriter(cast(KubeClient, client), interval=0.0)
    writer.offer("ns", "done", TrainerStatus(progress_percentage=100))
    writer.offer("ns", "gone", TrainerStatus(progress_percentage=1))
    assert writer.jobs() == {("ns", "done"), ("ns", "gone")}
    await until(lambda: not writer.jobs(), "both jobs forgotten")
    assert sorted(client.written) == ["done", "gone"]
    await writer.close()


def test_refused_posts_are_logged_at_most_ten_a_minute_the_next_saying_how_many_were_not() -> None:
    """Anyone who reaches the endpoint may be refused a thousand times a second: each refusal was a log line."""
    clock = [0.0]
    limit = EveryMinute(clock=lambda: clock[0])
    refused = PostRefusedError(401, "unauthenticated", "the token was refused")
    with capture_logs() as logged:
        for _ in range(1000):
            log_refusal("ns/pa", refused, limit)
        clock[0] = 61.0
        log_refusal("ns/pa", refused, limit)
    assert [entry["event"] for entry in logged] == ["progress post refused"] * 10 + [
        "progress post refused (990 more such records dropped in the last minute)"]
    assert logged[0]["why"] == "the token was refused" and limit.seen == 1001
