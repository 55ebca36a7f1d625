"""mpiop.controller.gone_pods: a pod deleted by someone else with a DisruptionTarget, gone before a pass saw it
going, is remembered for its job's current attempt (Observed.disrupted_gone), through the real pod informer."""

from __future__ import annotations

import types

import pytest

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.caches import Caches
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi", "ns").workers(2).obj()
RESTARTED = make_mpijob("pi", "ns").workers(2).status(restart_count=1).obj()
OTHER = make_mpijob("pi", "ns").uid("another-uid").workers(2).obj()


def versioned(pod: JSON, version: int) -> JSON:
    return {**pod, "kind": "Pod", "apiVersion": "v1", "metadata": {**pod["metadata"], "resourceVersion": str(version)}}


def caches_after(*events: tuple[str, JSON]) -> Caches:
    caches = Caches.build(types.SimpleNamespace(), "ns", watch_nodes=False)  # type: ignore[arg-type]
    for version, (event_type, obj) in enumerate(events, start=1):
        caches.pods.apply_event({"type": event_type, "object": versioned(obj, version)})
    return caches


RUNNING = make_pod(JOB, "worker", 1).running().obj()
PREEMPTED = make_pod(JOB, "worker", 1).running().disrupted("PreemptionByScheduler", "preempting").terminating().obj()
DELETED_PLAIN = make_pod(JOB, "worker", 1).running().terminating().obj()


@pytest.mark.parametrize(
    ("events", "job", "remembered"),
    [
        ((("ADDED", RUNNING), ("MODIFIED", PREEMPTED), ("DELETED", PREEMPTED)), JOB, ["pi-worker-1"]),
        # The condition seen only in the DELETED event's object: the cache's last is what decisions would have read.
        ((("ADDED", RUNNING), ("DELETED", PREEMPTED)), JOB, []),
        ((("ADDED", RUNNING), ("MODIFIED", DELETED_PLAIN), ("DELETED", DELETED_PLAIN)), JOB, []),
        ((("ADDED", RUNNING), ("MODIFIED", PREEMPTED)), JOB, []),  # still there: Observed.pods has it
        ((("ADDED", RUNNING), ("MODIFIED", PREEMPTED), ("DELETED", PREEMPTED)), RESTARTED, []),  # counted already
        ((("ADDED", RUNNING), ("MODIFIED", PREEMPTED), ("DELETED", PREEMPTED)), OTHER, []),  # an older job's
    ],
    ids=["gone-disrupted", "condition-never-cached", "plain-deletion", "still-there", "earlier-attempt",
         "older-job-of-the-name"],
)
def test_remembered_for_the_jobs_attempt(events: tuple[tuple[str, JSON], ...], job: MPIJob,
                                         remembered: list[str]) -> None:
    caches = caches_after(*events)
    observed = caches.observed(job)
    assert [p["metadata"]["name"] for p in observed.disrupted_gone] == remembered
    assert caches.disrupted_gone.count() == len(remembered)  # what is not the job's attempt is forgotten on reading


def test_forgotten_with_the_job() -> None:
    caches = caches_after(("ADDED", RUNNING), ("MODIFIED", PREEMPTED), ("DELETED", PREEMPTED))
    caches.disrupted_gone.forget(JOB.key)
    assert caches.observed(JOB).disrupted_gone == [] and caches.disrupted_gone.count() == 0
