"""A pod's event queues its job's pass after the batch period, once for all its pods' events in that time, and
not at all while a pass of the job is queued and still to start (it reads the cache as it is then)."""

from __future__ import annotations

import copy

import pytest

from mpiop.api.raw import JSON
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import KubeClient

OWNER = [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "j", "controller": True}]


def pod(name: str, version: int, phase: str) -> JSON:
    return {"kind": "Pod", "apiVersion": "v1", "status": {"phase": phase},
            "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": str(version),
                         "labels": {"training.kubeflow.org/job-role": "worker"}, "ownerReferences": OWNER}}


def manager(batch: float) -> Manager:
    return Manager(KubeClient(ClusterAccess("http://127.0.0.1:1")),
                   ManagerConfig(namespace="ns", pod_event_batch_seconds=batch))


async def test_the_events_of_a_jobs_pods_queue_one_pass_after_the_batch_period() -> None:
    m = manager(0.5)
    for n in range(3):
        m.caches.pods.apply_event({"type": "ADDED", "object": pod(f"pi-worker-{n}", 10 + n, "Pending")})
    m.caches.pods.apply_event({"type": "MODIFIED", "object": pod("pi-worker-0", 20, "Running")})
    m.caches.pods.apply_event({"type": "DELETED", "object": pod("pi-worker-1", 21, "Running")})
    assert len(m.queue) == 0
    assert m.queue.next_delayed_add() == pytest.approx(0.5, abs=0.2)
    m.queue.shut_down()


async def test_no_pass_is_added_for_a_job_whose_pass_is_still_to_start() -> None:
    m = manager(0.5)
    m.queue.add("ns/pi")
    m.caches.pods.apply_event({"type": "ADDED", "object": pod("pi-worker-0", 10, "Pending")})
    assert (len(m.queue), m.queue.next_delayed_add()) == (1, None)
    assert await m.queue.get() == "ns/pi"  # being processed: a change now may come too late for it
    m.caches.pods.apply_event({"type": "MODIFIED", "object": pod("pi-worker-0", 11, "Running")})
    assert m.queue.next_delayed_add() == pytest.approx(0.5, abs=0.2)
    m.queue.shut_down()


async def test_a_batch_period_of_zero_queues_at_once() -> None:
    m = manager(0.0)
    m.caches.pods.apply_event({"type": "ADDED", "object": copy.deepcopy(pod("pi-worker-0", 10, "Pending"))})
    assert (len(m.queue), m.queue.next_delayed_add()) == (1, None)
    m.queue.shut_down()


@pytest.mark.parametrize(("before", "after", "at_once"), [
    ("Running", "Succeeded", True),
    ("Running", "Failed", True),
    ("Pending", "Running", False),
    ("Succeeded", "Succeeded", False),
], ids=["succeeded", "failed", "running", "still-succeeded"])
async def test_a_pod_that_has_just_finished_queues_its_job_at_once(before: str, after: str, at_once: bool) -> None:
    """A launcher's end to the job's Succeeded (or a failed worker to the restart) does not wait for the batch."""
    m = manager(0.5)
    m.caches.pods.apply_event({"type": "ADDED", "object": pod("pi-launcher", 10, before)})
    while len(m.queue):  # an ADDED pod already finished is queued at once too; start from an empty queue
        m.queue.done(await m.queue.get())
    changed = pod("pi-launcher", 11, after)
    changed["status"]["containerStatuses"] = [{"name": "main", "state": {"terminated": {"exitCode": 0}}}]
    m.caches.pods.apply_event({"type": "MODIFIED", "object": changed})
    assert len(m.queue) == (1 if at_once else 0)
    m.queue.shut_down()
