"""JobStatus.deep_copy, the copy decide() changes: equal to the status it copies, sharing nothing mutable."""

from __future__ import annotations

from mpiop.api.v2beta1 import JobStatus

FULL_STATUS = {
    "conditions": [
        {"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "created",
         "lastTransitionTime": "2026-11-26T15:00:00Z", "lastUpdateTime": "2026-11-26T15:00:01Z"},
        {"type": "Restarting", "status": "True", "reason": "MPIJobRestarting", "message": "restarting",
         "lastTransitionTime": "2026-11-26T15:00:02Z", "lastUpdateTime": "2026-11-26T15:00:02Z"},
    ],
    "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2, "failed": 1}},
    "startTime": "2026-11-26T15:00:00Z", "completionTime": "2026-11-26T15:10:00Z",
    "lastReconcileTime": "2026-11-26T15:10:00Z", "restartCount": 2, "disruptionRestarts": 1,
    "excludedNodes": ["node-a", "node-b"], "attemptStartTime": "2026-11-26T15:05:00Z",
    "lastFailure": {"reason": "Error", "pod": "j-worker-1", "container": "main", "exitCode": 74, "node": "node-a",
                    "ranks": "2-3", "attempt": 1, "time": "2026-11-26T15:04:00Z"},
}


def test_a_copy_equals_its_status_field_for_field() -> None:
    status = JobStatus.model_validate(FULL_STATUS)
    copied = status.deep_copy()
    assert copied == status
    assert copied.to_json() == status.to_json() == JobStatus.model_validate(FULL_STATUS).to_json()


def test_changing_a_copy_leaves_its_status_alone() -> None:
    status = JobStatus.model_validate(FULL_STATUS)
    copied = status.deep_copy()
    copied.conditions[0].message = "changed"
    copied.conditions.pop()
    copied.replica_statuses[next(iter(copied.replica_statuses))].active = 9
    assert copied.excluded_nodes is not None and copied.last_failure is not None
    copied.excluded_nodes.append("node-c")
    copied.last_failure.exit_code = 1
    assert status.to_json() == JobStatus.model_validate(FULL_STATUS).to_json()
