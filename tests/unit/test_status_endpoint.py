"""mpiop.controller.status_endpoint's checks: whose pod may report for which job, and what a body may say."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from mpiop.controller.status_endpoint import PostRefusedError, Reviewer, check_reporter, parse_report
from testkit.mpijobs import at, make_mpijob

JOB = make_mpijob("pa", "ns").uid("job-uid").json()
WHO = Reviewer("ns", "pa-worker-0", "pod-uid")


def pod(uid: str = "pod-uid", owner: str = "job-uid") -> dict[str, object]:
    return {"metadata": {"name": "pa-worker-0", "namespace": "ns", "uid": uid,
                         "ownerReferences": [{"kind": "MPIJob", "name": "pa", "uid": owner, "controller": True}]}}


def test_the_jobs_own_pod_may_report() -> None:
    assert check_reporter(JOB, pod(), "ns", "pa", WHO).metadata.name == "pa"


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
    ],
    ids=["not-json", "not-object", "not-wrapped", "negative", "over-100", "negative-eta", "empty-metric-name",
         "too-many-metrics", "bad-time"],
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
