"""mpiop.policies.size: a job stored with more workers than mpiop supports fails at once, naming the field."""

from __future__ import annotations

from mpiop.api.v2beta1 import MAX_WORKER_REPLICAS
from mpiop.decide import decide
from mpiop.plan import Observed
from testkit.mpijobs import at, make_mpijob


def test_too_many_workers_fail_with_validation_error_and_nothing_is_built() -> None:
    job = make_mpijob("big", "ns").workers(2**31 - 1).obj()
    plan = decide(job, Observed(), at(0))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message == ("MPIJob ns/big has failed: spec.mpiReplicaSpecs.Worker.replicas: 2147483647 is more "
                              f"than the {MAX_WORKER_REPLICAS} workers mpiop supports")
    assert plan.objects_to_create == [] and not plan.create_ssh_secret


def test_the_maximum_itself_is_attempted() -> None:
    job = make_mpijob("big").workers(MAX_WORKER_REPLICAS).obj()
    plan = decide(job, Observed(), at(0))
    assert not plan.status.is_true("Failed")
    assert len([o for o in plan.objects_to_create if o["kind"] == "Pod"]) == 500  # one pass's share
    assert plan.requeue_after == 0
