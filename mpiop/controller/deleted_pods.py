"""What the pod cache holds after the operator's own pod deletions, until the watch says what became of them.

The next pass must neither see a deleted pod live (it would delete it again, or count it as running) nor lose
a newer pod of the same name. A DELETE by name carries the pod's uid as a precondition, so its outcome says:

- accepted, graceful: the answer is the pod with its deletionTimestamp, cached as is;
- accepted, gone at once: dropped, remembered at the answer's resourceVersion so a late event cannot bring
  it back;
- 404: gone already (e.g. a DELETE collection took it first): dropped;
- 409: the uid precondition failed, so the name now holds a newer pod and the one meant is gone. If the cache
  still holds the one meant, it is kept as terminating: dropped, the next pass would create the name again and
  be refused AlreadyExists; live, it would delete it again. A cached pod of another uid (the newer one, which
  the watch has already brought) is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.controller.caches import same_pod_but_binding_or_deletion_time
from mpiop.kube.client import ApiError
from mpiop.kube.informer import Informer, object_key


class DeletionsInFlight:
    """The pods whose DELETE (by name, or in a collection) this operator has sent and not had answered yet.

    The watch often brings a pod's deletionTimestamp before the DELETE's answer arrives (a collection's answer
    is long). That event is the pass's own write coming back: the pass caches the pod as terminating once
    answered, so the event queues no pass of its own (a second pass of every finished job did nothing else).
    """

    def __init__(self) -> None:
        self._keys: set[str] = set()

    @contextmanager
    def sending(self, pods: Iterable[podstate.Pod]) -> Iterator[None]:
        keys = {object_key(p) for p in pods} - self._keys  # a key another pass is deleting stays its
        self._keys |= keys
        try:
            yield
        finally:
            self._keys -= keys

    def only_this_deletion(self, old: JSON, new: JSON) -> bool:
        """`new` is `old` with the deletion in flight accepted, and nothing else a decision reads changed."""
        return (bool(self._keys) and podstate.is_terminating(new) and object_key(new) in self._keys  # cheap first
                and same_pod_but_binding_or_deletion_time(podstate.marked_terminating(old, "sent"), new))


def observe_collection(pods: Informer, planned: list[podstate.Pod], deleted: Collection[str], deleted_at: str) -> None:
    """After a DELETE collection: the planned pods it deleted are cached as terminating."""
    for pod in planned:
        if podstate.name(pod) in deleted:
            pods.observe_write(podstate.marked_terminating(pod, deleted_at))


def observe_by_name(pods: Informer, pod: podstate.Pod, outcome: JSON | ApiError, deleted_at: str) -> None:
    """After a DELETE of `pod` by name and uid: `outcome` is its answer, or the ApiError (raised again unless it
    is a 404 or a 409)."""
    key = object_key(pod)
    if isinstance(outcome, ApiError):
        if outcome.not_found:
            pods.observe_delete(key)
        elif outcome.conflict:
            cached, uid = pods.get(key), pod["metadata"].get("uid")
            meant = cached is not None and uid and cached["metadata"].get("uid") == uid
            if cached is not None and meant and not podstate.is_terminating(cached):
                pods.observe_write(podstate.marked_terminating(cached, deleted_at))
        else:
            raise outcome
    elif outcome.get("kind") == "Pod" and outcome["metadata"].get("deletionTimestamp"):
        pods.observe_write(outcome)
    else:
        pods.observe_delete(key, (outcome.get("metadata") or {}).get("resourceVersion"))
