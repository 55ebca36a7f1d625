"""mpiop.policies.forward_env: an unusable forward-env annotation fails the job at once, naming the entries."""

from __future__ import annotations

from mpiop.decide import decide
from mpiop.names import FORWARD_ENV_ANNOTATION
from mpiop.plan import Plan
from mpiop.policies import forward_env
from mpiop.policies.outcome import CONTINUE
from testkit.mpijobs import at, make_mpijob
from testkit.pods import observe


def test_bad_entries_fail_the_job_before_any_object() -> None:
    job = make_mpijob("t", "ml").annotation(FORWARD_ENV_ANNOTATION, "NCCL_*,BAD=1").obj()
    plan = decide(job, observe(job, owned_objects=False), at(3))
    failed = plan.status.condition("Failed")
    assert failed is not None
    assert (failed.status, failed.reason) == ("True", "ValidationError")
    assert failed.message == ("MPIJob ml/t has failed: metadata.annotations[mpiop.kubeflow.org/forward-env]: "
                              "'BAD=1' is not an environment variable name or NAME_PREFIX*")
    assert plan.objects_to_create == [] and not plan.create_ssh_secret
    assert ("Warning", "ValidationError") in [(e.type, e.reason) for e in plan.events]


def test_good_or_missing_annotation_is_no_decision() -> None:
    for builder in (make_mpijob("a"), make_mpijob("b").annotation(FORWARD_ENV_ANNOTATION, "NCCL_*, FOO")):
        job = builder.obj()
        plan = Plan(status=job.status.model_copy(deep=True))
        assert forward_env.apply(plan, job, at(0)) is CONTINUE
        assert plan.status.condition("Failed") is None
