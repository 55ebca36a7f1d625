"""The background Event recorder against the real apiserver: queued, sent, correlated like client-go's."""

from __future__ import annotations

from mpiop.api.raw import JSON
from mpiop.controller.events import COMBINED_PREFIX, SIMILAR_THRESHOLD, EventRecorder
from mpiop.kube.client import EVENTS, KubeClient
from mpiop.plan import Event
from testkit.mpijobs import at, make_mpijob


async def events_of(kube: KubeClient, namespace: str) -> list[JSON]:
    return list((await kube.list(EVENTS, namespace))["items"])


async def test_repeats_bump_one_event_and_many_messages_are_combined(kube: KubeClient, namespace: str) -> None:
    job = make_mpijob("pi", namespace).obj()
    recorder = EventRecorder(kube, instance="test")
    try:
        suspended = Event("Normal", "MPIJobSuspended", f"MPIJob {job.key} is suspended.")
        recorder.record(job, suspended, at(0))
        assert await recorder.flush()
        recorder.record(job, suspended, at(1))
        recorder.record(job, suspended, at(2))  # merged with the one still waiting
        assert await recorder.flush()
        [event] = await events_of(kube, namespace)
        assert (event["reason"], event["count"]) == ("MPIJobSuspended", 3)
        assert event["lastTimestamp"] == "2024-05-01T12:00:02Z"
        assert event["involvedObject"]["uid"] == job.metadata.uid

        for n in range(SIMILAR_THRESHOLD + 5):
            recorder.record(job, Event("Warning", "MPIJobRestarting", f"restart {n}"), at(10 + n))
            assert await recorder.flush()
    finally:
        await recorder.close()
    restarting = [e for e in await events_of(kube, namespace) if e["reason"] == "MPIJobRestarting"]
    plain = sorted(e["message"] for e in restarting if not e["message"].startswith(COMBINED_PREFIX))
    assert plain == sorted(f"restart {n}" for n in range(SIMILAR_THRESHOLD - 1))
    [combined] = [e for e in restarting if e["message"].startswith(COMBINED_PREFIX)]
    assert (combined["message"], combined["count"]) == (f"{COMBINED_PREFIX}restart {SIMILAR_THRESHOLD + 4}", 6)
