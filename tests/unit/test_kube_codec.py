"""One object orjson cannot decode (nested deeper than 1,024 levels) never fails a list or a watch stream."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mpiop.api.raw import JSON
from mpiop.kube.codec import UNDECODABLE, ListSplitter, decode_event, truncated, value_end


def deep(levels: int) -> JSON:
    """{"x": {"x": ... {"x": 1}}} with `levels` objects: what a tenant can put under preserved unknown fields."""
    value: Any = 1
    for _ in range(levels):
        value = {"x": value}
    return dict(value)


def job(name: str, nested: JSON | None = None) -> JSON:
    template: JSON = {"metadata": nested or {}, "spec": {"containers": [{"name": "m", "image": "i"}]}}
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "5",
                         "managedFields": [{"fieldsV1": nested or {}}]},
            "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}}}


def dumps_deep(obj: Any) -> bytes:
    """orjson refuses to encode what it refuses to decode: write the deep part by hand."""
    return orjson.dumps(obj).replace(b'"DEEP"', b'{"x":' * 1030 + b"1" + b"}" * 1030)


POISON = dumps_deep(job("poison", {"x": "DEEP"}))


def test_orjson_refuses_the_poison_object() -> None:
    with pytest.raises(orjson.JSONDecodeError, match="depth"):
        orjson.loads(POISON)


def test_truncating_keeps_the_shallow_part_and_nulls_the_deep_one() -> None:
    short = orjson.loads(truncated(POISON, 6))
    assert short["metadata"]["name"] == "poison"
    assert short["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] == {"x": None}
    assert orjson.loads(truncated(b'{"a":"]}{[\\"","b":[[[1]]]}', 2)) == {"a": ']}{["', "b": [None]}
    assert value_end(b'{"a":"}"} , {') == 9
    assert value_end(b'{"a":[') is None


@pytest.mark.parametrize("chunk", [1, 100, 1 << 20], ids=["byte-by-byte", "100-bytes", "whole"])
@pytest.mark.parametrize("where", [0, 1, 2], ids=["first", "middle", "last"])
def test_a_list_hands_out_the_undecodable_item_as_a_stub_and_every_other_item(chunk: int, where: int) -> None:
    jobs = [orjson.dumps(job(f"j{i}")) for i in range(3)]
    jobs[where] = POISON
    body = (b'{"apiVersion":"kubeflow.org/v2beta1","items":[' + b",".join(jobs)
            + b'],"kind":"MPIJobList","metadata":{"continue":"","resourceVersion":"9"}}')
    items: list[JSON] = []
    splitter = ListSplitter(items.append)
    for i in range(0, len(body), chunk):
        splitter.feed(body[i:i + chunk])
    assert splitter.close() == {"continue": "", "resourceVersion": "9"}
    assert [i["metadata"]["name"] for i in items] == [("poison" if n == where else f"j{n}") for n in range(3)]
    stub = items[where]
    assert "depth" in stub[UNDECODABLE]
    assert stub["metadata"] == {"name": "poison", "namespace": "ns", "uid": "uid-poison", "resourceVersion": "5"}
    assert stub["kind"] == "MPIJob" and "spec" not in stub
    assert all(UNDECODABLE not in i for n, i in enumerate(items) if n != where)


def test_a_watch_event_with_an_undecodable_object_carries_its_stub() -> None:
    event = decode_event(b'{"type":"MODIFIED","object":' + POISON + b"}")
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["resourceVersion"] == "5" and UNDECODABLE in event["object"]
    assert decode_event(b"[]") == []  # JSON, but not an event: the informer's to refuse
    with pytest.raises(ValueError):
        decode_event(b'{"type":"ADDED","object":')  # not JSON at all
    nameless = b'{"type":"ADDED","object":{"metadata":{}, "x":' + b"[" * 1100 + b"]" * 1100 + b"}}"
    with pytest.raises(ValueError):
        decode_event(nameless)  # too deep, and nothing to identify it by
