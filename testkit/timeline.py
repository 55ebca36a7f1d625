"""What a test saw happen in a namespace, each fact with the seconds since it began watching: its pods (created,
bound, Running, DisruptionTarget, deleting, gone), its MPIJobs' conditions and counters, and its Events.

The apiserver's watches, run in the background for a block (`watching`), in the order they arrived: a test asserts
on the order (`at`) and prints `lines()` for its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from mpiop.api.raw import JSON
from mpiop.kube.client import EVENTS, MPIJOBS, PODS, KubeClient, Resource

STATUS_COUNTERS = ("restartCount", "disruptionRestarts")


@dataclass(frozen=True)
class Fact:
    seconds: float
    kind: str  # pod, job, event
    name: str  # the pod's or job's; an Event's object's
    what: str

    def line(self) -> str:
        return f"{self.seconds:7.2f}s {self.kind:5} {self.name:16} {self.what}"


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    facts: list[Fact] = field(default_factory=list)
    _said: dict[str, set[str]] = field(default_factory=dict)  # uid -> the facts noted of it
    _jobs: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> condition type -> "status reason"

    def clock(self) -> float:
        """Seconds since the timeline began, to place a test's own step among the facts."""
        return time.monotonic() - self.started

    def mark(self, what: str) -> None:
        """A step of the test's own."""
        self.facts.append(Fact(self.clock(), "test", "", what))

    def _once(self, kind: str, obj: JSON, what: str) -> None:
        said = self._said.setdefault(obj["metadata"].get("uid", obj["metadata"]["name"]), set())
        if what not in said:
            said.add(what)
            self.facts.append(Fact(self.clock(), kind, obj["metadata"]["name"], what))

    def note_pod(self, event: JSON) -> None:
        pod = event["object"]
        if event["type"] == "DELETED":
            self._once("pod", pod, "gone")
            return
        labels = pod["metadata"].get("labels") or {}
        self._once("pod", pod, f"created (attempt {labels.get('mpiop.kubeflow.org/attempt', '?')})")
        if node := pod["spec"].get("nodeName"):
            self._once("pod", pod, f"bound to {node}")
        status = pod.get("status") or {}
        if status.get("phase") in ("Running", "Succeeded", "Failed"):
            self._once("pod", pod, status["phase"])
        for condition in status.get("conditions") or []:
            if condition["type"] == "DisruptionTarget" and condition["status"] == "True":
                self._once("pod", pod, f"DisruptionTarget {condition.get('reason')}: {condition.get('message')}")
        if pod["metadata"].get("deletionTimestamp"):
            self._once("pod", pod, f"deleting (grace {pod['metadata'].get('deletionGracePeriodSeconds')}s)")

    def note_job(self, event: JSON) -> None:
        job = event["object"]
        if event["type"] == "DELETED":
            return
        name, status = job["metadata"]["name"], job.get("status") or {}
        known = self._jobs.setdefault(name, {})
        for condition in status.get("conditions") or []:
            now = f"{condition['status']} {condition.get('reason')}"
            if known.get(condition["type"]) != now:
                known[condition["type"]] = now
                self.facts.append(Fact(self.clock(), "job", name, f"{condition['type']}={now}"))
        for counter in STATUS_COUNTERS:
            if (value := status.get(counter)) is not None and known.get(counter) != str(value):
                known[counter] = str(value)
                self.facts.append(Fact(self.clock(), "job", name, f"status.{counter}={value}"))

    def note_event(self, event: JSON) -> None:
        told = event["object"]
        if event["type"] != "ADDED":
            return
        message = " ".join(str(told.get("message") or "").split())
        self.facts.append(Fact(self.clock(), "event", told["involvedObject"]["name"],
                               f"{told.get('type')} {told.get('reason')}: {message[:160]}"))

    def at(self, kind: str, name: str, what: str) -> float:
        """When the first fact of that kind, of an object named `name`, began with `what`; it must have happened."""
        found = next((f.seconds for f in self.facts if f.kind == kind and f.name == name and f.what.startswith(what)),
                     None)
        assert found is not None, f"no {kind} {name} {what!r} in the timeline:\n" + "\n".join(self.lines())
        return found

    def of(self, kind: str, name: str) -> list[str]:
        return [f.what for f in self.facts if f.kind == kind and f.name == name]

    def lines(self) -> list[str]:
        return [f.line() for f in self.facts]


@contextlib.asynccontextmanager
async def watching(kube: KubeClient, namespace: str) -> AsyncIterator[Timeline]:
    """A Timeline of `namespace`'s pods, MPIJobs and Events from now on, its watches running for the block."""
    timeline = Timeline()
    notes = {PODS: timeline.note_pod, MPIJOBS: timeline.note_job, EVENTS: timeline.note_event}

    async def watch(resource: Resource, since: str) -> None:
        while True:
            async for event in kube.watch(resource, namespace, resource_version=since):
                since = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    notes[resource](event)

    versions = {r: (await kube.list(r, namespace))["metadata"]["resourceVersion"] for r in notes}
    tasks = [asyncio.create_task(watch(r, v)) for r, v in versions.items()]
    try:
        yield timeline
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
