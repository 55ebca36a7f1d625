"""mpiop.policies.refused: a template only the user can fix fails the job once; a refusal that may heal is
shown (ReplicaFailure, the field and the apiserver's message) and retried ever less often."""

from __future__ import annotations

import pytest

from mpiop.plan import Observed, Plan, Refusal
from mpiop.policies import refused
from mpiop.policies.outcome import CONTINUE, STOP
from testkit.mpijobs import at, make_mpijob

SA = 'pods "pi-worker-0" is forbidden: error looking up service account ns/train: serviceaccount "train" not found'
PRIORITY_CLASS = 'pods "pi-launcher" is forbidden: no PriorityClass with name high was found'
PRIORITY = ('pods "pi-worker-0" is forbidden: the integer value of priority (5) must not be provided in pod spec; '
            "priority admission controller computed 0 from the given PriorityClass name")
RUNTIME_CLASS = 'pods "pi-worker-0" is forbidden: pod rejected: RuntimeClass "gvisor" not found'
OVERHEAD = ('pods "pi-launcher" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass '
            "defined Overhead")
QUOTA = 'pods "pi-worker-0" is forbidden: exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4'
INVALID = 'Pod "pi-worker-0" is invalid: spec.containers[0].env[0].name: Invalid value: "1=2"'


@pytest.mark.parametrize(
    ("name", "code", "message", "field", "permanent"),
    [
        ("pi-worker-0", 403, SA, "Worker.template.spec.serviceAccountName", False),
        ("pi-launcher", 403, PRIORITY_CLASS, "Launcher.template.spec.priorityClassName", False),
        ("pi-worker-0", 403, PRIORITY, "Worker.template.spec.priority", True),
        ("pi-worker-0", 403, RUNTIME_CLASS, "Worker.template.spec.runtimeClassName", False),
        ("pi-launcher", 403, OVERHEAD, "Launcher.template.spec.overhead", True),
        ("pi-worker-0", 403, QUOTA, "Worker.template.spec.containers[*].resources", False),
        ("pi-worker-0", 422, INVALID, None, True),
        ("pi-worker-0", 403, 'pods is forbidden: User "x" cannot create resource "pods"', None, False),
    ],
)
def test_each_refusal_names_its_field_and_is_permanent_or_not(name: str, code: int, message: str,
                                                              field: str | None, permanent: bool) -> None:
    job = make_mpijob("pi", "ns").obj()
    refusal = Refusal("Pod", name, code, "Forbidden" if code == 403 else "Invalid", message)
    expected = f"spec.mpiReplicaSpecs.{field}" if field else None
    assert refused.field_path(job, refusal) == expected
    assert refused.is_permanent(refusal) is permanent


def test_a_permanent_refusal_fails_the_job_once() -> None:
    job = make_mpijob("pi", "ns").condition("Created").obj()
    observed = Observed(refused=[Refusal("Pod", "pi-worker-0", 403, "Forbidden", PRIORITY)])
    plan = Plan(status=job.status.model_copy(deep=True))
    assert refused.apply(plan, job, observed, at(5)) is STOP
    failed = plan.status.condition("Failed")
    assert failed is not None and (failed.status, failed.reason) == ("True", "ValidationError")
    assert failed.message == ("MPIJob ns/pi has failed: the apiserver refused Pod pi-worker-0 "
                              f"(spec.mpiReplicaSpecs.Worker.template.spec.priority): {PRIORITY}")
    assert plan.status.completion_time == at(5)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "ValidationError")]

    again = Plan(status=plan.status.model_copy(deep=True))
    refused.apply(again, job, observed, at(9))
    assert again.events == []
    assert again.status.completion_time == at(5)


def test_a_refusal_that_may_heal_is_shown_and_retried_with_backoff() -> None:
    job = make_mpijob("pi", "ns").condition("Created").obj()
    observed = Observed(refused=[Refusal("Pod", "pi-worker-0", 403, "Forbidden", SA),
                                 Refusal("Pod", "pi-worker-1", 403, "Forbidden", SA)])
    plan = Plan(status=job.status.model_copy(deep=True))
    assert refused.apply(plan, job, observed, at(0)) is CONTINUE  # go on: creations are retried
    failure = plan.status.condition("ReplicaFailure")
    assert failure is not None and (failure.status, failure.reason) == ("True", "FailedCreate")
    assert failure.message == (
        "MPIJob ns/pi cannot create its pods yet: the apiserver refused Pod pi-worker-0 "
        f"(spec.mpiReplicaSpecs.Worker.template.spec.serviceAccountName): {SA} (and 1 more); retrying")
    assert plan.status.conditions[-1].type == "ReplicaFailure"  # the STATE column shows it
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "FailedCreate")]
    assert plan.requeue_after == 1.0
    # Still refused: no new Event, and the wait doubles with the time it has lasted (capped at a minute).
    waits = []
    status = plan.status
    for seconds in (1, 2, 4, 8, 16, 32, 64, 600):
        later = Plan(status=status.model_copy(deep=True))
        refused.apply(later, job.model_copy(update={"status": status}), observed, at(seconds))
        assert later.events == []
        waits.append(later.requeue_after)
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_a_taken_name_is_not_this_policys() -> None:
    job = make_mpijob("pi").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    taken = Refusal("Secret", "pi-ssh", 409, "AlreadyExists", 'secrets "pi-ssh" already exists')
    assert refused.apply(plan, job, Observed(refused=[taken]), at(0)) is CONTINUE
    assert plan.status.conditions == [] and plan.events == []
