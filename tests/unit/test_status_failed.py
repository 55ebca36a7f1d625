"""mpiop.status.failed: Failed is final: completionTime set once, Running/Restarting False, one Event; every validation
fails through fail_invalid, in its one wording and cap."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mpiop.api.v2beta1 import MAX_WORKER_REPLICAS, MPIJob
from mpiop.names import EXCLUDE_FAILED_NODES_ANNOTATION, FORWARD_ENV_ANNOTATION
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan, Refusal
from mpiop.policies import cached_size, forward_env, node_exclusion, refused, size
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid, mark_failed
from testkit.mpijobs import at, make_mpijob


def test_failed_is_final_and_told_once() -> None:
    job = make_mpijob("pi").condition("Created", when=at(0)).condition("Running", when=at(1)).obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    mark_failed(plan, c.BACKOFF_LIMIT_EXCEEDED_REASON, "MPIJob ns/pi has failed", at(5), event_message="short")
    assert [(x.type, x.status) for x in plan.status.conditions] == [
        ("Created", "True"), ("Running", "False"), ("Failed", "True")]
    assert plan.status.completion_time == at(5)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", c.BACKOFF_LIMIT_EXCEEDED_REASON, "short")]
    mark_failed(plan, c.BACKOFF_LIMIT_EXCEEDED_REASON, "MPIJob ns/pi has failed", at(9))
    assert plan.status.completion_time == at(5), "completionTime is the first failure's"
    assert len(plan.events) == 1, "no second Event for the same Failed condition"


# Over-long on the job's own text: a forward-env list, the apiserver's message. size, cached_size and
# node_exclusion say only numbers and 100 characters of the annotation: a key longer than Kubernetes allows (948
# characters: 56 of the message are left for their text) is what takes them over the cap, which holds regardless.
LONG_NAME = "p" * 940
INVALID: list[tuple[str, MPIJob, Callable[[Plan, MPIJob], object], str]] = [
    ("an exception", make_mpijob("big").obj(),
     lambda plan, job: fail_invalid(plan, job.key, ValueError("x" * 5000), at(0)), "xxx"),
    ("size", make_mpijob(LONG_NAME).workers(MAX_WORKER_REPLICAS + 1).obj(),
     lambda plan, job: size.apply(plan, job, at(0)), "spec.mpiReplicaSpecs.Worker.replicas: "),
    ("cached_size", make_mpijob(LONG_NAME).annotation(cached_size.CUT_ANNOTATION, "2000000").obj(),
     lambda plan, job: cached_size.apply(plan, job, at(0), 512), "it is 2000000 bytes of JSON"),
    ("node_exclusion", make_mpijob(LONG_NAME).annotation(EXCLUDE_FAILED_NODES_ANNOTATION, "no").obj(),
     lambda plan, job: node_exclusion.refuse_bad_annotation(plan, job, at(0)), "metadata.annotations["),
    ("forward_env", make_mpijob("t").annotation(FORWARD_ENV_ANNOTATION, "1BAD," * 1000).obj(),
     lambda plan, job: forward_env.apply(plan, job, at(0)),
     f"metadata.annotations[{FORWARD_ENV_ANNOTATION}]: '1BAD', '1BAD'"),
    ("refused", make_mpijob("pi").obj(),
     lambda plan, job: refused.apply(plan, job, Observed(refused=[
         Refusal("Pod", "pi-launcher", 422, "Invalid", "x" * 5000)]), at(0)),
     "the apiserver refused Pod pi-launcher: xxx"),
]


@pytest.mark.parametrize(("job", "fail", "says"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID])
def test_fail_invalid_words_and_caps_every_validation(job: MPIJob, fail: Callable[[Plan, MPIJob], object],
                                                       says: str) -> None:
    plan = Plan(status=job.status.model_copy(deep=True))
    fail(plan, job)
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == c.VALIDATION_ERROR_REASON
    assert failed.message is not None and len(failed.message) == MESSAGE_LIMIT
    assert failed.message.startswith(f"MPIJob {job.key} has failed: {says}")
