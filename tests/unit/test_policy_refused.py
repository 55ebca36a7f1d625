"""mpiop.policies.refused: an object the apiserver refuses fails the job once, with its message."""

from __future__ import annotations

from mpiop.plan import Plan
from mpiop.policies import refused
from tests.builders import at, make_mpijob


def test_refused_fails_job_with_validation_error() -> None:
    job = make_mpijob("pi", "ns").condition("Created").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    refused.apply(plan, job, "Pod", "pi-worker-0", "spec.containers[0].image: Required value", at(5))
    failed = plan.status.condition("Failed")
    assert failed is not None
    assert (failed.status, failed.reason) == ("True", "ValidationError")
    assert failed.message == ("MPIJob ns/pi has failed: the apiserver refused Pod pi-worker-0: "
                              "spec.containers[0].image: Required value")
    assert plan.status.completion_time == at(5)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "ValidationError")]

    again = Plan(status=plan.status.model_copy(deep=True))
    refused.apply(again, job, "Pod", "pi-worker-0", "spec.containers[0].image: Required value", at(9))
    assert again.events == []
    assert again.status.completion_time == at(5)


def test_refused_message_is_capped() -> None:
    job = make_mpijob("pi").obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    refused.apply(plan, job, "Pod", "pi-launcher", "x" * 5000, at(0))
    failed = plan.status.condition("Failed")
    assert failed is not None
    assert failed.message is not None
    assert len(failed.message) == 1024
    assert failed.message.startswith("MPIJob default/pi has failed: the apiserver refused Pod pi-launcher: xxx")
