"""The watch event of the operator's own write, read before the write's answer, tells no handler (kube/echoes): on a
busy process it queued one more pass of the job that found nothing to do. A change of anyone else's seen meanwhile
is still told, once the write is over."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from mpiop.api.raw import JSON
from mpiop.controller.caches import Caches
from mpiop.controller.events import EventRecorder
from mpiop.controller.reconciler import Reconciler
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import CONFIGMAPS, KubeClient
from mpiop.kube.informer import Informer
from testkit.mpijobs import at, make_mpijob
from testkit.recording import RecordingClient

Change = tuple[JSON | None, JSON | None]


class EchoingClient(RecordingClient):
    """Answers as RecordingClient does, but the watch brings each write's event to the caches before the answer."""

    caches: Caches

    async def request_raw(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                          body: Any = None, content_type: str = "application/json",
                          timeout: float = 60.0, accept: str = "application/json") -> bytes:
        answer = await super().request_raw(method, path, query=query, body=body, content_type=content_type,
                                           timeout=timeout, accept=accept)
        plural = path.split("/namespaces/")[1].split("/")[1]
        informer = next(i for i in self.caches.all() if i.resource.plural == plural)
        informer.apply_event({"type": "ADDED" if method == "POST" else "MODIFIED", "object": orjson.loads(answer)})
        return answer


def recorded(informer: Informer) -> list[Change]:
    changes: list[Change] = []
    informer.handlers.append(lambda old, new: changes.append((old, new)))
    return changes


async def test_a_pass_whose_writes_are_watched_before_their_answers_tells_no_handler() -> None:
    client = EchoingClient(patched=[make_mpijob("pi", "ns").resource_version("7").json()])
    caches = client.caches = Caches.build(client, "ns")
    caches.mpijobs.observe_write(make_mpijob("pi", "ns").resource_version("7").json())
    told = {i.resource.plural: recorded(i) for i in caches.all()}
    reconciler = Reconciler(client, caches, EventRecorder(RecordingClient()), clock=lambda: at(60))
    await reconciler.reconcile("ns/pi")
    assert "PATCH mpijobs/pi/status" in client.writes() and "POST pods pi-launcher" in client.writes()
    assert {plural: changes for plural, changes in told.items() if changes} == {}
    assert caches.pods.get("ns/pi-launcher") is not None  # cached all the same


def config_map(version: int, data: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"hostfile": data},
            "metadata": {"name": "pi-config", "namespace": "ns", "resourceVersion": str(version)}}


def informer_with(obj: JSON) -> tuple[Informer, list[Change]]:
    informer = Informer(KubeClient(ClusterAccess("http://127.0.0.1:1")), CONFIGMAPS, "ns")
    informer.observe_write(obj)
    return informer, recorded(informer)


def test_the_echo_of_a_write_before_its_answer_is_dropped() -> None:
    informer, changes = informer_with(config_map(1, "a"))
    with informer.writing("ns/pi-config"):
        informer.apply_event({"type": "MODIFIED", "object": config_map(2, "b")})
        informer.observe_write(config_map(2, "b"))
    assert changes == []
    assert informer.get("ns/pi-config") == config_map(2, "b")


@pytest.mark.parametrize(("events", "answer"), [
    ([config_map(2, "theirs")], config_map(3, "ours")),  # another's write came first, ours not yet watched
    ([config_map(2, "ours"), config_map(3, "theirs")], config_map(2, "ours")),  # ours, then another's
    ([config_map(2, "theirs")], None),  # our write failed
], ids=["another-version", "two-events", "write-failed"])
def test_a_change_not_of_the_write_is_told_once_the_write_is_over(events: list[JSON], answer: JSON | None) -> None:
    informer, changes = informer_with(config_map(1, "before"))
    with pytest.raises(RuntimeError) if answer is None else contextlib.nullcontext(), informer.writing("ns/pi-config"):
        for event in events:
            informer.apply_event({"type": "MODIFIED", "object": event})
        assert changes == []
        if answer is None:
            raise RuntimeError("the write failed")
        informer.observe_write(answer)
    assert changes == [(config_map(1, "before"), informer.get("ns/pi-config"))]


def test_a_deletion_during_a_write_is_told_at_once_and_once() -> None:
    informer, changes = informer_with(config_map(1, "before"))
    with informer.writing("ns/pi-config"):
        informer.apply_event({"type": "MODIFIED", "object": config_map(2, "ours")})
        informer.apply_event({"type": "DELETED", "object": config_map(3, "ours")})
        assert changes == [(config_map(2, "ours"), None)]
    assert changes == [(config_map(2, "ours"), None)]


def test_without_a_write_in_flight_a_change_is_told_at_once() -> None:
    informer, changes = informer_with(config_map(1, "before"))
    informer.apply_event({"type": "MODIFIED", "object": config_map(2, "theirs")})
    assert changes == [(config_map(1, "before"), config_map(2, "theirs"))]

