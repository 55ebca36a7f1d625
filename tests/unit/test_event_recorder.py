"""The Event recorder's correlator against a fake API client: overflow, retries, the PATCH-404-then-POST
fallback, and the Events lost at close. (tests/integration/test_events.py runs it against the real apiserver.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from mpiop.api.raw import JSON
from mpiop.controller.events import EventRecorder
from mpiop.kube.client import ApiError, Resource
from mpiop.plan import MESSAGE_LIMIT, Event
from testkit.mpijobs import at, make_mpijob
from testkit.waits import until

JOB = make_mpijob("pi").obj()


def counted(result: str) -> float:
    return REGISTRY.get_sample_value("mpiop_events_total", {"result": result}) or 0.0


class FakeEvents:
    """Records the recorder's calls; answers with the errors queued in `failures` first, and waits for `gate`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JSON]] = []
        self.failures: list[Exception] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self._names = 0

    async def _answer(self, verb: str, body: JSON) -> None:
        self.calls.append((verb, body))
        await self.gate.wait()
        if self.failures:
            raise self.failures.pop(0)

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        await self._answer("create", body)
        self._names += 1
        return {**body, "metadata": {**body["metadata"], "name": f"pi.{self._names}"}}

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: JSON) -> JSON:
        await self._answer(f"patch {name}", body)
        return body

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]


@pytest.fixture
async def fake() -> FakeEvents:
    return FakeEvents()


@pytest.fixture
async def recorder(fake: FakeEvents) -> AsyncIterator[EventRecorder]:
    recorder = EventRecorder(fake, instance="test", concurrency=2, max_pending=3, retry_delays=(0.0, 0.0))
    yield recorder
    await recorder.close(timeout=0)


def warning(n: int) -> Event:
    return Event("Warning", f"Reason{n}", f"message {n}")


async def test_when_too_many_wait_the_oldest_are_dropped_and_counted(fake: FakeEvents,
                                                                     recorder: EventRecorder) -> None:
    dropped = counted("dropped")
    for n in range(5):  # nothing is sent before the test yields: 5 wait, for 3 places
        recorder.record(JOB, warning(n), at(n))
    assert await recorder.flush(timeout=5)
    assert sorted(body["reason"] for _, body in fake.calls) == ["Reason2", "Reason3", "Reason4"]
    assert counted("dropped") - dropped == 2


async def test_a_repeat_waiting_is_merged_and_one_sent_is_bumped(fake: FakeEvents, recorder: EventRecorder) -> None:
    for n in range(3):
        recorder.record(JOB, warning(0), at(n))
    assert await recorder.flush(timeout=5)
    recorder.record(JOB, warning(0), at(10))
    assert await recorder.flush(timeout=5)
    assert fake.verbs() == ["create", "patch pi.1"]
    assert (fake.calls[0][1]["count"], fake.calls[0][1]["lastTimestamp"]) == (3, "2024-05-01T12:00:02Z")
    assert fake.calls[1][1]["count"] == 4


async def test_transient_failures_are_retried_and_others_are_not(fake: FakeEvents, recorder: EventRecorder) -> None:
    failed = counted("failed")
    fake.failures = [ApiError(503, {}, "POST", "/events"), OSError("reset")]
    recorder.record(JOB, warning(0), at(0))
    assert await recorder.flush(timeout=5)
    assert fake.verbs() == ["create"] * 3
    assert counted("failed") == failed

    fake.failures = [ApiError(422, {"reason": "Invalid"}, "POST", "/events")]
    recorder.record(JOB, warning(1), at(1))
    assert await recorder.flush(timeout=5)
    assert fake.verbs() == ["create"] * 4
    assert counted("failed") - failed == 1


async def test_a_transient_failure_past_the_last_retry_is_counted(fake: FakeEvents, recorder: EventRecorder) -> None:
    failed = counted("failed")
    fake.failures = [ApiError(500, {}, "POST", "/events")] * 3
    recorder.record(JOB, warning(0), at(0))
    assert await recorder.flush(timeout=5)
    assert fake.verbs() == ["create"] * 3
    assert counted("failed") - failed == 1


async def test_an_event_deleted_since_it_was_sent_is_created_again(fake: FakeEvents,
                                                                   recorder: EventRecorder) -> None:
    recorder.record(JOB, warning(0), at(0))
    assert await recorder.flush(timeout=5)
    fake.failures = [ApiError(404, {"reason": "NotFound"}, "PATCH", "/events/pi.1")]
    recorder.record(JOB, warning(0), at(1))
    assert await recorder.flush(timeout=5)
    assert fake.verbs() == ["create", "patch pi.1", "create"]
    assert (fake.calls[2][1]["count"], fake.calls[2][1]["firstTimestamp"]) == (1, "2024-05-01T12:00:01Z")
    recorder.record(JOB, warning(0), at(2))  # the new one is the one bumped from now on
    assert await recorder.flush(timeout=5)
    assert fake.verbs()[-1] == "patch pi.2"


async def test_events_waiting_or_being_sent_at_close_are_counted_as_lost(fake: FakeEvents,
                                                                         recorder: EventRecorder) -> None:
    dropped = counted("dropped")
    fake.gate.clear()  # the apiserver never answers
    for n in range(3):
        recorder.record(JOB, warning(n), at(n))
    recorder.record(JOB, warning(2), at(3))  # merged: 4 Events in 3 entries
    await until(lambda: len(fake.calls) >= 2, "both senders waiting for an answer")
    assert len(fake.calls) == 2  # two senders, each stuck on one
    await recorder.close(timeout=0.05)
    assert counted("dropped") - dropped == 4
    assert await recorder.flush(timeout=1)  # nothing left behind


def test_a_long_message_is_cut_to_the_limit() -> None:
    assert len(Event("Warning", "Long", "x" * 5000).message) == MESSAGE_LIMIT
    assert Event("Normal", "Short", "fits").message == "fits"


async def test_unsent_counts_events_waiting_and_being_sent(fake: FakeEvents, recorder: EventRecorder) -> None:
    fake.gate.clear()  # the apiserver does not answer yet
    for n in range(3):
        recorder.record(JOB, warning(n), at(n))
    await until(lambda: len(fake.calls) >= 2, "both senders waiting for an answer")
    assert len(fake.calls) == 2 and recorder.unsent() == 3  # two being sent, one waiting
    fake.gate.set()
    assert await recorder.flush(timeout=5)
    assert recorder.unsent() == 0


async def test_an_events_message_is_sent_escaped(fake: FakeEvents, recorder: EventRecorder) -> None:
    """`kubectl describe` and `kubectl get events` print an Event's message raw: a tenant's termination message in it
    is escaped (lines kept: a report and its log tail)."""
    recorder.record(JOB, Event("Warning", "MPIJobFailed", "boom \x1b]0;pwned\x07\u202e\nLast lines:\n\x1b[2J"), at(0))
    assert await recorder.flush(timeout=5)
    assert fake.calls[0][1]["message"] == "boom \\x1b]0;pwned\\x07\\u202e\nLast lines:\n\\x1b[2J"
