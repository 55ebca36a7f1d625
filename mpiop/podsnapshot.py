"""What decisions read off one pod, read once (`State`), and the cached pod that carries it (`TrimmedPod`).

A 10,000-pod job is looked at many times per pass: `state(pod)` reads the fields through `podstate`'s accessors
once, when the informer stores the pod (`with_state`), and every later pass reads attributes.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, TypedDict

from mpiop import podstate
from mpiop.api.raw import TrimmedMetadata
from mpiop.podstate import Pod


class State(NamedTuple):
    """What decisions read off one pod: the answers of the `podstate` accessors of the same names."""

    name: str
    role: str
    replica: int | None  # the replica index label
    attempt: int
    phase: str
    terminating: bool
    ready: bool
    in_place_failures: int = 0  # container failures restarted in place (restartPolicy OnFailure)

    @property
    def running(self) -> bool:
        return podstate.running_in(self.phase, self.terminating)

    @property
    def active(self) -> bool:
        return podstate.active_in(self.phase, self.terminating)


class TerminatedRun(TypedDict, total=False):
    exitCode: int
    reason: str
    message: str  # its tail, only of a run that failed


class WaitingRun(TypedDict, total=False):
    reason: str  # CrashLoopBackOff, or an image pull failure
    message: str


class ContainerRun(TypedDict, total=False):
    waiting: WaitingRun
    terminated: TerminatedRun


class ContainerStatus(TypedDict, total=False):
    name: str | None
    state: ContainerRun
    lastState: ContainerRun
    restartCount: int  # only once it is not 0


class PodCondition(TypedDict, total=False):
    type: str  # Ready, PodScheduled (False only) or DisruptionTarget (True only)
    status: str | None
    reason: str
    message: str


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    conditions: list[PodCondition]
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]


class PodSpec(TypedDict, total=False):
    nodeName: str
    restartPolicy: Literal["OnFailure"]  # the one policy decisions read


class TrimmedPodBody(TypedDict, total=False):
    """The keys `controller.trims.trim_pod` keeps of a Pod, and no other: mypy checks the trim writes these."""

    metadata: TrimmedMetadata
    status: PodStatus
    spec: PodSpec


class TrimmedPod(dict[str, Any]):
    """A cached pod (what `controller.trims.trim_pod` keeps) that also carries its `State`.

    Cached objects are replaced, never changed in place, so the State stays true for the object's life and a
    10,000-pod job's every reconcile reads 10,000 attributes instead of parsing 10,000 pods. It compares and
    serializes as the plain dict it is.
    """

    __slots__ = ("state",)
    state: State


def read(pod: Pod) -> State:
    """The State of a pod, through the accessors: one reader of a pod's fields."""
    return State(podstate.name(pod), podstate.role(pod), podstate.replica_index(pod), podstate.attempt(pod),
                 podstate.phase(pod), podstate.is_terminating(pod), podstate.is_ready(pod),
                 podstate.in_place_failures(pod))


def with_state(trimmed: TrimmedPodBody) -> TrimmedPod:
    """The trimmed pod as the cache keeps it: its State read once, now."""
    cached = TrimmedPod(trimmed)
    cached.state = read(cached)
    return cached


def state(pod: Pod) -> State:
    """A pod's State: ready on a pod the informer trimmed, else read (this runs for every pod, every pass)."""
    if isinstance(pod, TrimmedPod):
        return pod.state
    return read(pod)
