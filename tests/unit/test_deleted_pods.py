"""What the pod cache holds after the operator deletes a pod by name, in each order the watch may bring the rest.

The informer is the real one, fed watch events through `apply_event` as the watch would; only the DELETE's
outcome is given. Above all, a 409 (the uid precondition failed: the name holds a newer pod) never drops or
marks the newer pod, and never leaves the one meant live.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.controller import deleted_pods
from mpiop.kube.client import PODS, ApiError, KubeClient
from mpiop.kube.informer import Informer

KEY = "ns/pi-worker-1"
DELETED_AT = "2026-11-26T00:00:00Z"


def pod(uid: str, version: int, **metadata: Any) -> JSON:
    return {"kind": "Pod", "apiVersion": "v1", "status": {"phase": "Running"},
            "metadata": {"name": "pi-worker-1", "namespace": "ns", "uid": uid, "resourceVersion": str(version),
                         **metadata}}


def informer_with(*events: tuple[str, JSON]) -> Informer:
    informer = Informer(cast(KubeClient, None), PODS)
    for event_type, obj in events:
        informer.apply_event({"type": event_type, "object": obj})
    return informer


def error(status: int, reason: str) -> ApiError:
    return ApiError(status, {"kind": "Status", "reason": reason, "message": reason}, "DELETE", "/api/v1/.../pods/x")


PRECONDITION_FAILED = error(409, "Conflict")
OLD, NEW = pod("old", 10), pod("new", 12)


def test_a_409_keeps_the_pod_meant_as_terminating_until_the_watch_brings_the_newer_one() -> None:
    pods = informer_with(("ADDED", OLD))
    deleted_pods.observe_by_name(pods, OLD, PRECONDITION_FAILED, DELETED_AT)
    cached = pods.get(KEY)
    assert cached is not None and cached["metadata"]["uid"] == "old"
    assert podstate.is_terminating(cached), "live, the next pass would delete it again"
    pods.apply_event({"type": "DELETED", "object": pod("old", 11)})
    pods.apply_event({"type": "ADDED", "object": NEW})
    cached = pods.get(KEY)
    assert cached is not None and cached["metadata"]["uid"] == "new" and not podstate.is_terminating(cached)


def test_a_409_leaves_the_newer_pod_alone_when_the_watch_brought_it_first() -> None:
    pods = informer_with(("ADDED", OLD), ("DELETED", pod("old", 11)), ("ADDED", NEW))
    deleted_pods.observe_by_name(pods, OLD, PRECONDITION_FAILED, DELETED_AT)
    assert pods.get(KEY) == NEW


def test_a_409_after_the_deletion_event_brings_nothing_back() -> None:
    pods = informer_with(("ADDED", OLD), ("DELETED", pod("old", 11)))
    deleted_pods.observe_by_name(pods, OLD, PRECONDITION_FAILED, DELETED_AT)
    assert pods.get(KEY) is None


def test_a_404_drops_the_pod_at_once() -> None:
    pods = informer_with(("ADDED", OLD))
    deleted_pods.observe_by_name(pods, OLD, error(404, "NotFound"), DELETED_AT)
    assert pods.get(KEY) is None


def test_a_graceful_deletion_is_cached_with_its_deletion_timestamp() -> None:
    pods = informer_with(("ADDED", OLD))
    deleted_pods.observe_by_name(pods, OLD, pod("old", 11, deletionTimestamp=DELETED_AT), DELETED_AT)
    cached = pods.get(KEY)
    assert cached is not None and podstate.is_terminating(cached)


def test_a_pod_gone_at_once_is_dropped_and_a_late_event_does_not_bring_it_back() -> None:
    pods = informer_with(("ADDED", OLD))
    deleted_pods.observe_by_name(pods, OLD, {"kind": "Status", "metadata": {"resourceVersion": "11"}}, DELETED_AT)
    pods.apply_event({"type": "MODIFIED", "object": pod("old", 10)})  # an event from before the deletion
    assert pods.get(KEY) is None


def test_any_other_refusal_is_raised() -> None:
    pods = informer_with(("ADDED", OLD))
    with pytest.raises(ApiError, match="Forbidden"):
        deleted_pods.observe_by_name(pods, OLD, error(403, "Forbidden"), DELETED_AT)
    assert pods.get(KEY) == OLD


def test_after_a_collection_only_the_pods_it_deleted_are_terminating() -> None:
    other = {**pod("w0", 5), "metadata": {**pod("w0", 5)["metadata"], "name": "pi-worker-0"}}
    pods = informer_with(("ADDED", OLD), ("ADDED", other))
    deleted_pods.observe_collection(pods, [OLD, other], {"pi-worker-1"}, DELETED_AT)
    assert [podstate.is_terminating(p) for p in (pods.get(KEY), pods.get("ns/pi-worker-0")) if p] == [True, False]


def test_a_deletion_in_flight_coming_back_on_the_watch_is_not_news() -> None:
    """Only while its DELETE is unanswered, only for the pods it deletes, and only the deletion itself."""
    deleting = deleted_pods.DeletionsInFlight()
    live = pod("a", 10)
    terminating = pod("a", 11, deletionTimestamp=DELETED_AT)
    failed = {**terminating, "status": {"phase": "Failed"}}
    other = {**pod("b", 12), "metadata": {**pod("b", 12)["metadata"], "name": "pi-worker-2"}}
    other_terminating = {**other, "metadata": {**other["metadata"], "deletionTimestamp": DELETED_AT}}
    assert not deleting.only_this_deletion(live, terminating)
    with deleting.sending([live]):
        assert deleting.only_this_deletion(live, terminating)
        assert not deleting.only_this_deletion(live, failed)
        assert not deleting.only_this_deletion(live, live)
        assert not deleting.only_this_deletion(other, other_terminating)
        with deleting.sending([live, other]):  # another pass's pods: the first pass's key stays its own
            assert deleting.only_this_deletion(other, other_terminating)
        assert deleting.only_this_deletion(live, terminating)
    assert not deleting.only_this_deletion(live, terminating)
