"""mpiop.policies.cleanup: cleanPodPolicy None / Running / All."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import CleanPodPolicy
from mpiop.plan import Observed, Plan
from mpiop.policies import cleanup
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi").workers(5).obj()
PODS = [
    make_pod(JOB, "launcher").succeeded().obj(),
    make_pod(JOB, "worker", 0).running().obj(),
    make_pod(JOB, "worker", 1).obj(),  # Pending
    make_pod(JOB, "worker", 2).failed().obj(),
    make_pod(JOB, "worker", 3).running().terminating().obj(),
    make_pod(JOB, "worker", 4).unknown().obj(),
]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("None", []),
        ("Running", ["pi-worker-0", "pi-worker-1", "pi-worker-4"]),
        ("All", ["pi-launcher", "pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-worker-4"]),
    ],
    ids=["none-keeps-all", "running-deletes-active", "all-deletes-every-pod"],
)
def test_pods_to_delete(policy: CleanPodPolicy, expected: list[str]) -> None:
    assert [podstate.name(p) for p in cleanup.pods_to_delete(policy, PODS)] == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, ["pi-worker-0", "pi-worker-1", "pi-worker-4"]),
        ("None", []),
        ("All", ["pi-launcher", "pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-worker-4"]),
    ],
    ids=["default-is-running", "none", "all"],
)
def test_apply_uses_the_jobs_policy(policy: CleanPodPolicy | None, expected: list[str]) -> None:
    builder = make_mpijob("pi").workers(5)
    if policy is not None:
        builder.clean_pod_policy(policy)
    job = builder.obj()
    plan = Plan(status=job.status)
    cleanup.apply(plan, job, Observed(pods=PODS))
    assert [podstate.name(p) for p in plan.pods_to_delete] == expected
