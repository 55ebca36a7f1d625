"""Objects the apiserver refuses: fail the job when the template itself is wrong, else show why and retry.

400/422 (a pod template schema and CEL could not catch) and the admission plugins' 403s that only the
template can fix (`priority` set beside a PriorityClass, `overhead` without a RuntimeClass that defines one)
fail the job once, reason ValidationError: retrying would only repeat the refusal. Other 403s name
something that may appear later (a ServiceAccount, PriorityClass or RuntimeClass, quota): the job shows
ReplicaFailure (reason FailedCreate) with the field and the apiserver's message, and creation is retried.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan, Refusal
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status import replica_failure
from mpiop.status.failed import fail_invalid

# (text in the apiserver's message, pod spec field, permanent): the admission plugins' 403s, checked in order.
ADMISSION_REFUSALS: tuple[tuple[str, str, bool], ...] = (
    ("must not be provided in pod spec", "priority", True),  # Priority: priority without (its) class
    ("Overhead set without", "overhead", True),  # RuntimeClass: overhead the class does not define
    ("error looking up service account", "serviceAccountName", False),  # ServiceAccount
    ("no PriorityClass with name", "priorityClassName", False),  # Priority
    ("RuntimeClass", "runtimeClassName", False),  # RuntimeClass: not found
    ("exceeded quota", "containers[*].resources", False),  # ResourceQuota
)


def field_path(job: MPIJob, refusal: Refusal) -> str | None:
    """Which field of the MPIJob the refusal is about, when the apiserver's message says."""
    if refusal.kind != "Pod":
        return None
    replica = LAUNCHER if refusal.name.startswith(names.launcher_name(job)) else WORKER  # any attempt's
    for text, field, _ in ADMISSION_REFUSALS:
        if text in refusal.message:
            return f"spec.mpiReplicaSpecs.{replica}.template.spec.{field}"
    return None


def is_permanent(refusal: Refusal) -> bool:
    if refusal.code in (400, 422):
        return True
    return refusal.forbidden and any(text in refusal.message and permanent
                                       for text, _, permanent in ADMISSION_REFUSALS)


def describe(job: MPIJob, refusal: Refusal) -> str:
    field = field_path(job, refusal)
    about = f" ({field})" if field else ""
    return f"the apiserver refused {refusal.kind} {refusal.name}{about}: {refusal.message}"


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> Outcome:
    """Failed on a permanent refusal (STOP); ReplicaFailure for one that may heal."""
    refusals = [r for r in observed.refused if not r.name_taken]
    permanent = next((r for r in refusals if is_permanent(r)), None)
    if permanent is not None:
        fail(plan, job, permanent, now)
        return STOP
    if refusals:
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        message = f"MPIJob {job.key} cannot create its pods yet: {describe(job, refusals[0])}{more}; retrying"
        replica_failure.report(plan, c.FAILED_CREATE_REASON, message[:MESSAGE_LIMIT], now)
    return CONTINUE


def fail(plan: Plan, job: MPIJob, refusal: Refusal, now: dt.datetime) -> None:
    fail_invalid(plan, job.key, describe(job, refusal), now)
