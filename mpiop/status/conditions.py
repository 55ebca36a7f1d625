"""Setting job conditions the way kubectl and kubeflow's clients read them.

Transition times move only when a condition's status changes. The list keeps kubeflow's order: a
condition that becomes True moves to the end, one that changes otherwise stays in its place (so a
finished job reads Created, Running, Succeeded, as under kubeflow's operator). `.status.conditions[-1:]`
(the CRD's State column, as in kubeflow) must be the current state: when the last condition is no
longer True (a resume, Suspended going False), the most recent True one is moved to the end.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import ConditionStatus, ConditionType, JobCondition, JobStatus
from mpiop.printable import printable

CREATED_REASON = "MPIJobCreated"
RUNNING_REASON = "MPIJobRunning"
RESTARTING_REASON = "MPIJobRestarting"
SUCCEEDED_REASON = "MPIJobSucceeded"
FAILED_REASON = "MPIJobFailed"
SUSPENDED_REASON = "MPIJobSuspended"
RESUMED_REASON = "MPIJobResumed"
DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"
# No progress reported within the job's progress deadline (policies/stall): the attempt's and the final reason.
STALLED_REASON = "Stalled"
# Containers restarted in place (restartPolicy OnFailure) passed backoffLimit: the Job controller's reason.
BACKOFF_LIMIT_EXCEEDED_REASON = "BackoffLimitExceeded"
CONTAINER_RESTARTED_REASON = "ContainerRestarted"  # a container failed and the kubelet restarts it in place
VALIDATION_ERROR_REASON = "ValidationError"
# ReplicaFailure's reasons: the apiserver refused an object for now (a ServiceAccount that does not exist
# yet), or an object of the job's name exists that the job does not control (kubeflow's event reason).
FAILED_CREATE_REASON = "FailedCreate"
RESOURCE_EXISTS_REASON = "ErrResourceExists"
CREATED_OBJECTS_REASON = "ObjectsCreated"
LIFECYCLE_REASONS = frozenset({CREATED_REASON, RUNNING_REASON, SUCCEEDED_REASON})
"""The Normal Events of every job's life (kubeflow's too): what --no-lifecycle-events keeps from being sent."""


def set_condition(
    status: JobStatus,
    condition_type: ConditionType,
    value: ConditionStatus,
    reason: str,
    message: str,
    now: dt.datetime,
) -> bool:
    """Set one condition; return True when it became True just now (a transition worth an Event). The message is
    escaped (`printable`, lines kept): a condition tells what a tenant's pods wrote; `kubectl describe` prints it."""
    message = printable(message, newlines=True)
    existing = status.condition(condition_type)
    if existing is not None and (existing.status, existing.reason, existing.message) == (value, reason, message):
        return False
    became_true = value == "True" and (existing is None or existing.status != "True")
    if existing is None or existing.status != value:
        condition = JobCondition(type=condition_type, status=value, reason=reason, message=message,
                                 last_update_time=now, last_transition_time=now)
    else:
        condition = existing.model_copy(update={"reason": reason, "message": message, "last_update_time": now})
    if existing is not None and not became_true:
        status.conditions[status.conditions.index(existing)] = condition
    else:
        status.conditions = [c for c in status.conditions if c.type != condition_type] + [condition]
    _current_state_last(status)
    return became_true


def _current_state_last(status: JobStatus) -> None:
    conditions = status.conditions
    if not conditions or conditions[-1].status == "True":
        return
    current = next((c for c in reversed(conditions) if c.status == "True"), None)
    if current is not None:
        conditions.remove(current)
        conditions.append(current)


def set_false_if_true(status: JobStatus, condition_type: ConditionType, reason: str, message: str,
                      now: dt.datetime) -> None:
    if status.is_true(condition_type):
        set_condition(status, condition_type, "False", reason, message, now)
