"""The integration suite's verifyLogs: which captured operator log lines fail a test at teardown."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.operator import RECONCILE_FAILED, unexpected_reconcile_errors


@pytest.mark.parametrize(
    ("lines", "errors"),
    [
        ([{"event": "reconciled"}], []),
        ([{"event": RECONCILE_FAILED, "error": "PATCH /x: 409 Conflict: the object has been modified"}], []),
        ([{"event": RECONCILE_FAILED, "error": "POST /api/v1/namespaces/n/pods: 500 InternalError: boom"}],
         ["POST /api/v1/namespaces/n/pods: 500 InternalError: boom"]),
        ([{"event": RECONCILE_FAILED, "error": "KeyError('spec')"}], ["KeyError('spec')"]),
    ],
    ids=["no-failure", "conflict-is-expected", "api-error", "bug"],
)
def test_reconcile_failures_other_than_conflicts_are_reported(lines: list[dict[str, Any]], errors: list[str]) -> None:
    assert unexpected_reconcile_errors(lines) == errors
