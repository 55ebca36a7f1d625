"""mpiop.controller.soft_writes.only_soft_writes: which plans may wait for a transition to ride along with."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import MPIJob, ReplicaStatus
from mpiop.controller.soft_writes import may_wait, only_soft_writes, status_change, suspended_first_status
from mpiop.decide import decide
from mpiop.plan import Event, Observed, Plan
from testkit.mpijobs import at, make_mpijob
from testkit.nodes import gpu_nodes
from testkit.pods import make_pod, observe

JOB = make_mpijob("pi", "ns").workers(2).obj()


def settled() -> Plan:
    """A job with its pods made and Pending: its plan changes nothing."""
    JOB.status = decide(JOB, observe(JOB), at(0)).status
    return decide(JOB, observe(JOB, [make_pod(JOB, "launcher").obj(), make_pod(JOB, "worker", 0).obj(),
                                     make_pod(JOB, "worker", 1).obj()]), at(1))


def counts(plan: Plan) -> Plan:
    plan.status.replica_statuses["Worker"] = ReplicaStatus(active=2, ready=1)
    return plan


CACHED = {"data": {"hostfile": "h", "discover_hosts.sh": "#!/bin/sh\n"}}


def hostfile(plan: Plan) -> Plan:
    """discover_hosts.sh lists a Running worker more."""
    plan.objects_to_update.append({"kind": "ConfigMap", "metadata": {"name": "pi-config"},
                        "data": {"hostfile": "h", "discover_hosts.sh": "#!/bin/sh\necho w0:1\n"}})
    return plan


def host_ports(plan: Plan) -> Plan:
    """The hostfile itself changes (host-network ports): the launcher may be waiting for it."""
    plan.objects_to_update.append({"kind": "ConfigMap", "metadata": {"name": "pi-config"},
                        "data": {"hostfile": "h:2222", "discover_hosts.sh": "#!/bin/sh\n"}})
    return plan


def transition(plan: Plan) -> Plan:
    plan.status.completion_time = at(5)
    return plan


@pytest.mark.parametrize(
    ("change", "soft"),
    [
        (lambda p: p, False),
        (counts, True),
        (hostfile, True),
        (lambda p: hostfile(counts(p)), True),
        (lambda p: transition(counts(p)), False),
        (lambda p: (p.events.append(Event("Normal", "R", "m")), counts(p))[1], False),
        (lambda p: (p.pods_to_delete.append(make_pod(JOB, "worker", 1).obj()), hostfile(p))[1], False),
        (host_ports, False),
    ],
    ids=["nothing-to-write", "replica-counts", "discover-hosts", "both", "with-a-transition", "with-an-event",
         "with-a-deletion", "the-hostfile-itself"],
)
def test_only_soft_writes(change: object, soft: bool) -> None:
    plan = settled()
    old = plan.status.model_copy(deep=True)
    assert callable(change)
    changed = change(plan)
    assert isinstance(changed, Plan)
    assert only_soft_writes(changed, status_change(old, changed.status), CACHED) is soft


def test_status_change_patches_whole_and_nulls_what_was_cleared() -> None:
    plan = settled()
    old = plan.status.model_copy(deep=True)
    assert status_change(old, plan.status) == status_change(old, old)
    assert status_change(old, old).patch is None and not status_change(old, old).fields
    old.completion_time = at(3)
    change = status_change(old, counts(plan).status)
    assert change.fields == {"completionTime", "replicaStatuses"}
    assert change.patch is not None and change.patch["completionTime"] is None
    assert change.patch["conditions"] == plan.status.to_json()["conditions"]  # the whole status, not a diff


@pytest.mark.parametrize(
    ("job", "held"),
    [
        (make_mpijob("pi", "ns").suspend(True).obj(), True),
        (make_mpijob("pi", "ns").obj(), False),
        (make_mpijob("pi", "ns").suspend(False).obj(), False),
        (make_mpijob("pi", "ns").suspend(True).condition("Created", "True").obj(), False),
    ],
    ids=["created-suspended", "created-running", "suspend-false", "suspended-after-its-first-status"],
)
def test_a_suspended_jobs_first_status_may_wait(job: MPIJob, held: bool) -> None:
    """Its first pass (Created, Suspended, an Event) is a transition, and still held; a running job's is not."""
    plan = decide(job, observe(job, owned_objects=False), at(0))
    status = status_change(job.status, plan.status)
    assert not only_soft_writes(plan, status)
    assert suspended_first_status(job) is held
    assert may_wait(job, plan, status) is held


def test_a_suspended_jobs_first_pass_that_lays_it_out_waits_too() -> None:
    """On purpose (soft_writes' docstring): written at once, the layout races Kueue's admission of the job as
    written, and Kueue v0.17.0 can end admitting the old pod sets for the laid-out job."""
    job = make_mpijob("bench", "ns").total_gpus(16).suspend(True).obj()
    plan = decide(job, Observed(nodes=gpu_nodes("n", 4, 8)), at(0))
    assert plan.mpijob_patch is not None
    assert may_wait(job, plan, status_change(job.status, plan.status))
