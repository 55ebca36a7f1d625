"""mpiop.api.merge: RFC 7386's own examples (its Appendix A), one row each, and that neither input changes."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.merge import merged

APPENDIX_A = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), APPENDIX_A)
def test_rfc_7386_appendix_a(target: Any, patch: Any, result: Any) -> None:
    assert merged(target, patch) == result


def test_inputs_are_left_as_they_were() -> None:
    target = {"spec": {"replicas": 1, "template": {"containers": [{"name": "main"}]}}, "kept": {"x": 1}}
    patch = {"spec": {"replicas": 2, "template": {"containers": [{"name": "main", "image": "pi"}]}}}
    before_target, before_patch = repr(target), repr(patch)
    answer = merged(target, patch)
    answer["spec"]["template"]["containers"][0]["image"] = "changed"
    answer["spec"]["replicas"] = 3
    assert (repr(target), repr(patch)) == (before_target, before_patch)
