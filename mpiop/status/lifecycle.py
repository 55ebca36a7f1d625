"""Created and Running, and the per-replica pod counts: read off the observed pods (Succeeded: policies/success).

A job's lifecycle, not its training's progress (status.trainerStatus, policies/stall; milestones: status.milestones).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from mpiop import names, podsnapshot, podstate
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob, ReplicaStatus, ReplicaType
from mpiop.plan import Observed, Plan
from mpiop.status import conditions as c
from mpiop.status import in_place


def mark_created(plan: Plan, job: MPIJob, now: dt.datetime) -> None:
    message = f"MPIJob {job.key} is created."
    if plan.status.condition("Created") is None and c.set_condition(
        plan.status, "Created", "True", c.CREATED_REASON, message, now
    ):
        plan.event("Normal", c.CREATED_REASON, message)


def mark_running(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    """Running when the current attempt's launcher and every one of its workers run."""
    status = plan.status
    attempt = status.attempt
    launcher = observed.launcher(job, attempt)
    if launcher is None or podstate.attempt(launcher) != attempt or not podstate.is_running(launcher):
        return
    mark_running_if_workers_run(plan, job, observed, now)


def mark_running_if_workers_run(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime) -> None:
    """Running once every worker of the current attempt runs (the caller has seen its launcher run)."""
    status = plan.status
    attempt = status.attempt
    if observed.workers_all(job, attempt, lambda s: s.running):
        message = running_message(job, observed)
        if c.set_condition(status, "Running", "True", c.RUNNING_REASON, message, now):
            plan.event("Normal", c.RUNNING_REASON, message)
        c.set_false_if_true(status, "Restarting", c.RUNNING_REASON, message, now)


def running_message(job: MPIJob, observed: Observed) -> str:
    """`MPIJob ns/name is running.`, or with the containers restarted in place counted against backoffLimit."""
    restarts = in_place.note(job, observed)
    return f"MPIJob {job.key} is running; {restarts}" if restarts else f"MPIJob {job.key} is running."


def after(observed: Observed, plan: Plan) -> Observed:
    """The pods as they will be once the plan is carried out: deleted ones going, created ones Pending.

    The status written before the plan's creations and deletions then already counts them (as kubeflow's,
    written after its creations, does), instead of costing a second status write when the caches catch up.
    """
    going = {podstate.name(p) for p in plan.pods_to_delete}
    pods = [{**p, "metadata": {**p["metadata"], "deletionTimestamp": "planned"}} if podstate.name(p) in going else p
            for p in observed.pods]
    pods += [{"metadata": o["metadata"], "status": {"phase": "Pending"}} for o in plan.creation_steps.pods()]
    return replace(observed, pods=pods)


def replica_statuses(job: MPIJob, observed: Observed) -> dict[ReplicaType, ReplicaStatus]:
    """Each replica type's pods by state. A suspended job's pods still being deleted count as active: they hold
    their nodes' GPUs until they end (a graceful stop's launcher for up to its grace), and Kueue, which releases a
    suspended job's quota once no replica is active, then admits the next job only when they are gone."""
    counts: dict[ReplicaType, ReplicaStatus] = {}
    stopping = bool(job.spec.run_policy.suspend)
    for replica_type, role in ((LAUNCHER, names.LAUNCHER_ROLE), (WORKER, names.WORKER_ROLE)):
        if job.spec.mpi_replica_specs.get(replica_type) is None:
            continue
        # An adopted job's launcher pods are its kubeflow launcher Job's.
        states = [s for s in observed.states + [podsnapshot.state(p) for p in observed.launcher_batch_job_pods]
                  if s.role == role]
        counts[replica_type] = ReplicaStatus(
            active=sum(1 for s in states
                       if s.active or (stopping and s.terminating and podstate.active_in(s.phase, False))),
            succeeded=sum(1 for s in states if s.phase == "Succeeded"),
            failed=sum(1 for s in states if s.phase == "Failed"),
            ready=sum(1 for s in states if s.ready),
            selector=names.selector_string(job, role),
        )
    return counts
