"""mpiop.status.conditions: kubeflow's order (Created, Running, ...) with the current state last; transition times."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import ConditionStatus, ConditionType, JobStatus
from mpiop.status.conditions import set_condition, set_false_if_true
from testkit.mpijobs import at

Step = tuple[ConditionType, ConditionStatus]


def order(status: JobStatus) -> list[str]:
    return [f"{c.type}={c.status}" for c in status.conditions]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([("Created", "True")], ["Created=True"]),
        ([("Created", "True"), ("Running", "True")], ["Created=True", "Running=True"]),
        ([("Created", "True"), ("Running", "True"), ("Restarting", "True"), ("Running", "False")],
         ["Created=True", "Running=False", "Restarting=True"]),
        ([("Created", "True"), ("Running", "True"), ("Restarting", "True"), ("Running", "False"),
          ("Running", "True"), ("Restarting", "False")],
         ["Created=True", "Restarting=False", "Running=True"]),
        ([("Created", "True"), ("Running", "True"), ("Succeeded", "True"), ("Running", "False")],
         ["Created=True", "Running=False", "Succeeded=True"]),
        ([("Created", "True"), ("Running", "True"), ("Failed", "True"), ("Running", "False")],
         ["Created=True", "Running=False", "Failed=True"]),
        ([("Created", "True"), ("Suspended", "True"), ("Suspended", "False")],
         ["Suspended=False", "Created=True"]),
        ([("Created", "True"), ("Suspended", "True"), ("Suspended", "False"), ("Running", "True")],
         ["Suspended=False", "Created=True", "Running=True"]),
        ([("Running", "False"), ("Created", "True"), ("Failed", "False")],
         ["Running=False", "Failed=False", "Created=True"]),
        ([("Created", "True"), ("Running", "True"), ("Created", "True")], ["Created=True", "Running=True"]),
    ],
    ids=["one", "running-last", "restarting-last", "running-again-last", "succeeded-last", "failed-last",
         "resumed-shows-created", "resumed",
         "false-ones-first", "true-again-keeps-place"],
)
def test_order(steps: list[Step], expected: list[str]) -> None:
    status = JobStatus()
    for i, (condition_type, value) in enumerate(steps):
        set_condition(status, condition_type, value, f"R{i}", f"m{i}", at(i))
    assert order(status) == expected
    assert [c.type for c in status.conditions].count("Running") <= 1


@pytest.mark.parametrize(
    ("first", "second", "reason2", "became_true", "transition_at", "update_at"),
    [
        ("True", "True", "R", False, 0, 0),
        ("True", "True", "Other", False, 0, 10),
        ("False", "True", "R", True, 10, 10),
        ("True", "False", "R", False, 10, 10),
        ("Unknown", "True", "R", True, 10, 10),
    ],
    ids=["unchanged", "reason-only", "false-to-true", "true-to-false", "unknown-to-true"],
)
def test_transition_times(first: ConditionStatus, second: ConditionStatus, reason2: str, became_true: bool,
                          transition_at: int, update_at: int) -> None:
    status = JobStatus()
    assert set_condition(status, "Running", first, "R", "m", at(0)) is (first == "True")
    assert set_condition(status, "Running", second, reason2, "m", at(10)) is became_true
    [condition] = status.conditions
    assert condition.status == second
    assert condition.reason == reason2
    assert condition.last_transition_time == at(transition_at)
    assert condition.last_update_time == at(update_at)


def test_message_change_updates_in_place() -> None:
    status = JobStatus()
    set_condition(status, "Restarting", "True", "R", "first", at(0))
    set_condition(status, "Running", "True", "R", "m", at(1))
    assert set_condition(status, "Restarting", "True", "R", "second", at(2)) is False
    assert order(status) == ["Restarting=True", "Running=True"]
    restarting = status.condition("Restarting")
    assert restarting is not None
    assert restarting.message == "second"
    assert restarting.last_transition_time == at(0)
    assert restarting.last_update_time == at(2)


def test_wire_form_of_times() -> None:
    status = JobStatus()
    set_condition(status, "Created", "True", "MPIJobCreated", "made", at(0))
    assert status.to_json()["conditions"] == [{
        "type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "made",
        "lastUpdateTime": "2024-05-01T12:00:00Z", "lastTransitionTime": "2024-05-01T12:00:00Z",
    }]


@pytest.mark.parametrize(
    ("before", "after"),
    [(None, None), ("False", "False"), ("True", "False")],
    ids=["absent-stays-absent", "false-untouched", "true-goes-false"],
)
def test_set_false_if_true(before: ConditionStatus | None, after: ConditionStatus | None) -> None:
    status = JobStatus()
    if before is not None:
        set_condition(status, "Running", before, "Before", "b", at(0))
    set_false_if_true(status, "Running", "After", "a", at(5))
    condition = status.condition("Running")
    assert (condition.status if condition else None) == after
    if before == "False":
        assert condition is not None
        assert condition.reason == "Before"
    if before == "True":
        assert condition is not None
        assert (condition.reason, condition.last_transition_time) == ("After", at(5))


def test_a_conditions_message_is_escaped_and_setting_it_again_changes_nothing() -> None:
    """A condition tells what a tenant's pods wrote (a termination message, a log tail): `kubectl describe` prints
    it."""
    status = JobStatus()
    message = "pi-worker-1 container main Error exit 1: boom \x1b]0;pwned\x07\nLast lines of pi-launcher/main:\n\u202e"
    assert set_condition(status, "Restarting", "True", "MPIJobRestarting", message, at(0))
    shown = "pi-worker-1 container main Error exit 1: boom \\x1b]0;pwned\\x07\nLast lines of pi-launcher/main:\n\\u202e"
    assert status.conditions[0].message == shown
    assert not set_condition(status, "Restarting", "True", "MPIJobRestarting", message, at(1))
    assert status.conditions[0].last_update_time == at(0)
