"""codec.Shaped: an informer that decodes only its trim's fields (its shape) caches exactly what a whole decode
would have, whatever the object holds; what does not fit the shape is decoded whole."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpiop.api.raw import JSON
from mpiop.controller.caches import JOB_LABEL_INDEX, OWNER_INDEX, Caches
from mpiop.controller.trims import PodShape, trim_pod
from mpiop.desired import pods
from mpiop.kube.codec import UNDECODABLE, Shaped, decode_event
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi").workers(3).obj()
# Words the trims look for, so that generated objects take the trims' every branch.
WORDS = ["Ready", "PodScheduled", "DisruptionTarget", "True", "False", "CrashLoopBackOff", "ErrImagePull",
         "ImagePullBackOff", "OnFailure", "Never", "MPIJob", "Job", "pi", "training.kubeflow.org/job-name",
         "Running", "Failed", "Evicted"]
LEAVES = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
          | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4) | st.sampled_from(WORDS))
ANY_JSON = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=3) | st.sampled_from(WORDS), inner, max_size=3), max_leaves=8)


def shaped(shape: Any) -> st.SearchStrategy[Any]:
    """Values of `shape` (a TypedDict, list[...] or Any) most of the time, any JSON value now and then, and objects
    with keys the shape does not name: what an apiserver (or a corrupt object) may send."""
    if shape is Any:
        return ANY_JSON
    if typing.get_origin(shape) is list:
        return st.lists(shaped(typing.get_args(shape)[0]), max_size=3) | ANY_JSON
    assert typing.is_typeddict(shape), shape
    fields = {key: shaped(hint) for key, hint in typing.get_type_hints(shape).items()}
    extra = st.dictionaries(st.sampled_from(["managedFields", "extra", "running"]), ANY_JSON, max_size=2)
    known = st.fixed_dictionaries({}, optional=fields)
    return st.builds(lambda a, b: {**a, **b}, extra, known) | st.just(None) | ANY_JSON


def outcome(trim: Callable[[JSON], JSON], obj: Any) -> tuple[str, Any]:
    try:
        return "trimmed", trim(obj)
    except Exception as error:  # the whole decode's failure must be the shape's too
        return "raised", type(error)


POD_SHAPE = Shaped(PodShape)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped(PodShape))
def test_the_trim_of_a_pod_decoded_in_its_shape_is_the_trim_of_the_whole_pod(pod: Any) -> None:
    raw = orjson.dumps(pod)
    assert outcome(trim_pod, POD_SHAPE.object(raw)) == outcome(trim_pod, orjson.loads(raw))
    line = b'{"type":"MODIFIED","object":' + raw + b"}"
    event = POD_SHAPE.event(line)
    whole = decode_event(line)
    assert event["type"] == whole["type"]
    assert outcome(trim_pod, event["object"]) == outcome(trim_pod, whole["object"])


def _full_pods() -> list[JSON]:
    """Pods as the apiserver answers them: managedFields, the whole spec, a kubelet's status."""
    full = []
    for n, pod in enumerate([pods.worker_pod(JOB, 1, 2), pods.launcher_pod(JOB, 0),
                             make_pod(JOB, "worker", 0, 0).running().obj(),
                             make_pod(JOB, "worker", 2, 1).failed(reason="OOMKilled", exit_code=137).obj(),
                             make_pod(JOB, "worker", 2, 1).evicted().obj(),
                             make_pod(JOB, "worker", 2, 1).unschedulable().obj()]):
        pod = orjson.loads(orjson.dumps(pod))
        pod["metadata"].update(uid=f"u-{n}", resourceVersion=str(100 + n), creationTimestamp="2024-05-01T12:00:00Z",
                               managedFields=[{"manager": "mpiop", "fieldsV1": {"f:spec": {"f:containers": {}}}}])
        pod.setdefault("spec", {}).update(nodeName="n1", containers=[{"name": "main", "image": "i", "env": []}])
        pod.setdefault("status", {}).update(hostIP="10.0.0.1", podIP="10.1.0.1", qosClass="BestEffort")
        full.append(pod)
    return full


@pytest.mark.parametrize("pod", _full_pods(), ids=lambda p: str(p["metadata"]["resourceVersion"]))
def test_the_pod_informer_caches_and_indexes_the_same_either_way(pod: JSON) -> None:
    """The pod informer with its shape against one without: the same cached object, State and index entries."""
    def informer(shape: bool) -> Any:
        caches = Caches.build(types.SimpleNamespace(), "default", watch_nodes=False)  # type: ignore[arg-type]
        if not shape:
            caches.pods.shape = None
            caches.pods.__post_init__()
        return caches.pods

    line = b'{"type":"ADDED","object":' + orjson.dumps(pod) + b"}"
    with_shape, without = informer(True), informer(False)
    with_shape.apply_event(with_shape.decode_line(line))
    without.apply_event(without.decode_line(line))
    key = f"default/{pod['metadata']['name']}"
    assert with_shape.get(key) == without.get(key) and with_shape.get(key).state == without.get(key).state
    assert with_shape.by_index(OWNER_INDEX, "default/pi") == without.by_index(OWNER_INDEX, "default/pi") != []
    assert with_shape.by_index(JOB_LABEL_INDEX, "default/pi") == without.by_index(JOB_LABEL_INDEX, "default/pi") != []


def test_what_does_not_fit_the_shape_is_decoded_whole() -> None:
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"7",' \
               b'"annotations":{"k8s.io/initial-events-end":"true"}}}}'
    assert POD_SHAPE.event(bookmark) == orjson.loads(bookmark)
    gone = b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410}}'
    assert POD_SHAPE.event(gone) == orjson.loads(gone)  # the code, which a pod's shape does not name
    assert POD_SHAPE.event(b"[]") == []  # JSON, but not an event: the informer's to refuse
    with pytest.raises(ValueError):
        POD_SHAPE.event(b'{"type":"ADDED","object":')
    status = b'{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"p"}}'
    assert POD_SHAPE.object(status) == orjson.loads(status)
    deep = b'{"metadata":{"name":"p","resourceVersion":"3"},"spec":{"x":' + b"[" * 1030 + b"]" * 1030 + b"}}"
    event = POD_SHAPE.event(b'{"type":"MODIFIED","object":' + deep + b"}")
    assert event["object"][UNDECODABLE] and event["object"]["metadata"] == {"name": "p", "resourceVersion": "3"}
