"""mpiop.kube.resourceversion: well-formed versions (KEP-5504) are ordered by value; anything else is not."""

from __future__ import annotations

import pytest

from mpiop.kube import resourceversion


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("9", "10", -1),
    ("10", "9", 1),
    ("123", "123", 0),
    ("123", "124", -1),
    ("99999999999999999999999", "100000000000000000000000", -1),  # longer than any machine integer
    ("0", "1", None),  # "0" means "any" in a list or watch, never a live object's version
    ("010", "9", None),  # leading zero
    ("", "1", None),
    ("abc", "abd", None),  # another server's opaque scheme: equality only
    ("1.5", "2", None),
    ("١٢", "12", None),  # non-ASCII digits
])
def test_compare(a: str, b: str, expected: int | None) -> None:
    assert resourceversion.compare(a, b) == expected


def test_order_reads_the_object() -> None:
    assert resourceversion.order({"metadata": {"resourceVersion": "7"}}, "8") == -1
    assert resourceversion.order({"metadata": {}}, "8") is None
    assert resourceversion.order({}, "8") is None
