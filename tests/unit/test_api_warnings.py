"""The apiserver's Warning headers: parsed, each text logged once, bounded (mpiop/kube/warnings.py)."""

from __future__ import annotations

import pytest
import structlog

from mpiop.kube.warnings import MAX_TEXT, ApiWarnings, texts


@pytest.mark.parametrize(("header", "want"), [
    ('299 - "resource.k8s.io/v1alpha3 DeviceTaintRule is deprecated in v1.36+"',
     ["resource.k8s.io/v1alpha3 DeviceTaintRule is deprecated in v1.36+"]),
    ('299 - "spec.containers[0].env[1]: hides previous definition of \\"OMPI_X\\""',
     ['spec.containers[0].env[1]: hides previous definition of "OMPI_X"']),
    ('299 - "one", 299 - "two"', ["one", "two"]),
    ("not a warning", []),
])
def test_texts(header: str, want: list[str]) -> None:
    assert texts(header) == want


def test_each_text_logged_once_and_counted() -> None:
    warnings = ApiWarnings()
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            warnings.record("POST", "pods", ['299 - "duplicate port definition"'])
        warnings.record("GET", "devicetaintrules", ['299 - "v1alpha3 is deprecated"'])
    assert warnings.counts == {"duplicate port definition": 3, "v1alpha3 is deprecated": 1}
    assert [(e["warning"], e["verb"], e["resource"]) for e in logs] == [
        ("duplicate port definition", "POST", "pods"), ("v1alpha3 is deprecated", "GET", "devicetaintrules")]


def test_a_tenant_cannot_grow_it_or_reach_the_terminal() -> None:
    warnings = ApiWarnings(max_kinds=4)
    with structlog.testing.capture_logs() as logs:
        for i in range(100):
            warnings.record("POST", "pods", [f'299 - "hides previous definition of \\"X{i}\x1b]0;pwned\x07\\""'])
        warnings.record("POST", "pods", ['299 - "' + "a" * 5000 + '"'])
    assert len(warnings.counts) == 4 and len(logs) == 4
    assert warnings.other == 97 and warnings.total() == 101
    assert all("\x1b" not in e["warning"] and "\x07" not in e["warning"] for e in logs)
    assert all(len(text) <= MAX_TEXT + 16 for text in warnings.counts)
