"""The status endpoint's 202 tells a rank that its job is stopping (policies/graceful_stop.notice), so a rank that
reports progress learns it where no signal reaches it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp.test_utils import TestClient, TestServer

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import TrainerStatus
from mpiop.controller.caches import Caches
from mpiop.desired.settings import Settings
from mpiop.policies import graceful_stop
from mpiop.serving.status_endpoint import Reviewer, StatusWriter, TokenReviews, status_app
from testkit.mpijobs import at, make_mpijob

POD = {"metadata": {"name": "pa-worker-0", "namespace": "ns", "uid": "pod-uid",
                    "labels": {"training.kubeflow.org/operator-name": "mpi-operator",
                               "training.kubeflow.org/job-name": "pa", "training.kubeflow.org/job-role": "worker"},
                    "ownerReferences": [{"kind": "MPIJob", "name": "pa", "uid": "job-uid", "controller": True}]}}


@dataclass
class Store:
    objects: dict[str, JSON]

    def get(self, key: str) -> JSON | None:
        return self.objects.get(key)


@dataclass
class FakeCaches:
    mpijobs: Store
    pods: Store = field(default_factory=lambda: Store({"ns/pa-worker-0": POD}))


class FakeReviews:
    async def review(self, token: str, source: str) -> Reviewer:
        return Reviewer("ns", "pa-worker-0", "pod-uid")


@dataclass
class FakeWriter:
    offered: list[TrainerStatus] = field(default_factory=list)

    def offer(self, namespace: str, name: str, report: TrainerStatus) -> None:
        self.offered.append(report)


async def answer(job: JSON) -> tuple[int, dict[str, Any]]:
    app = status_app(cast(Caches, FakeCaches(Store({"ns/pa": job}))), cast(TokenReviews, FakeReviews()),
                     cast(StatusWriter, FakeWriter()),
                     stop_notice=lambda j: graceful_stop.notice(j, Settings(stop_grace_seconds=20)))
    async with TestClient(TestServer(app)) as client:
        response = await client.post("/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/pa/status",
                                     headers={"Authorization": "Bearer t"},
                                     json={"trainerStatus": {"progressPercentage": 10}})
        return response.status, cast(dict[str, Any], await response.json())


async def test_a_running_job_answers_without_stop() -> None:
    code, body = await answer(make_mpijob("pa", "ns").uid("job-uid").json())
    assert (code, body) == (202, {"kind": "Status", "status": "Success", "code": 202})


async def test_a_stopping_job_tells_why_and_until_when() -> None:
    job = (make_mpijob("pa", "ns").uid("job-uid")
           .condition("Stopping", reason="Suspended", message="stopping", when=at(100)).json())
    code, body = await answer(job)
    assert code == 202
    assert body["stop"] == {"reason": "Suspended", "deadline": "2024-05-01T12:02:00Z"}
