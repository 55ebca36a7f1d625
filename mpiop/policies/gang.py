"""Gang scheduling (`mpiop run --gang-scheduling NAME`): one PodGroup per job, and why a gang is not placed.

With `--gang-scheduling kubernetes` (the default scheduler's own gangs, scheduling.k8s.io/v1beta1) the PodGroup is
the attempt's, `<job>-<attempt>`: a new attempt gets a new one and the older attempts' are deleted; one of the
current name still being deleted (its finalizer waits for its pods to go, as after a suspend) holds the pods back
until it is gone. Its PodGroupInitiallyScheduled condition, False, says why the gang waits.

The PodGroup (desired/podgroup) is created before any pod: the reconciler writes it first, and a pod is never
planned without it. It follows the spec (minMember follows Worker.replicas), is deleted while the job is
suspended (Kueue re-admits it, maybe changed, on resume, when it is made again) and once the job finished;
the garbage collector removes it with the job. Every pod the plan creates joins it.

While no pod of the current attempt runs and the gang scheduler holds them back, the job's Running
condition is False with reason PodGroupUnschedulable and a message built from the PodGroup's status
(Volcano's Unschedulable condition, its phase) and the scheduler's PodScheduled message on the pods, plus a
Warning Event, so `kubectl describe mpijob` says why nothing runs. Once the gang is placed the condition
goes again.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import podgroup
from mpiop.desired.podgroup import GangScheduler
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan, PodGroupWrite
from mpiop.policies import suspend
from mpiop.policies.outcome import CONTINUE, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid

UNSCHEDULABLE_REASON = "PodGroupUnschedulable"
# A Volcano PodGroup is Pending until a scheduling session admits it to its queue (about a second): only one
# still Pending after this long is reported as waiting for its queue.
QUEUE_GRACE_SECONDS = 10.0


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, scheduler: GangScheduler | None) -> Outcome:
    """Plan the PodGroup's create/patch/delete, put new pods in the gang, and report a gang held back."""
    if scheduler is None:
        return CONTINUE
    attempt = plan.status.attempt
    name = podgroup.pod_group_name(job, scheduler, attempt)
    existing = observed.pod_group(name)
    ended = plan.status.finished or suspend.is_suspended(job)
    if scheduler.kubernetes:
        plan.stale_pod_groups = [n for g in observed.pod_groups if (n := g["metadata"]["name"]) != name
                                 and _attempt_group(job, n) and not g["metadata"].get("deletionTimestamp")]
    if ended:
        if existing is not None and not existing["metadata"].get("deletionTimestamp"):
            plan.pod_group = PodGroupWrite("delete", name)
        _clear(plan)
        return CONTINUE
    if scheduler.kubernetes and existing is not None and existing["metadata"].get("deletionTimestamp"):
        plan.creation_steps.drop_pods()  # a pod joins a group by name for good: the next one, once this one is gone
        return CONTINUE
    try:
        wanted = podgroup.pod_group(job, scheduler, attempt)
    except ValueError as error:  # a quantity that is not one, pods of two classes: retrying cannot help
        fail_invalid(plan, job.key, error, now)
        plan.creation_steps.drop_pods()
        return CONTINUE
    if existing is None:
        plan.pod_group = PodGroupWrite("create", name, wanted)
    elif (patch := podgroup.spec_patch(scheduler, wanted["spec"], existing)) is not None:
        plan.pod_group = PodGroupWrite("patch", name, patch)
    if plan.pod_group is not None and (warning := podgroup.min_member_warning(job)):
        plan.event("Warning", "MinAvailableLowered", warning)
    for pod in plan.creation_steps.pods():
        podgroup.join_pod(pod, job, scheduler, podstate.attempt(pod))
    _report(plan, job, observed, wanted, scheduler, now)
    return CONTINUE


def _attempt_group(job: MPIJob, name: str) -> bool:
    """`<job>-<n>`: an attempt's PodGroup (names.attempt_pod_group_name)."""
    suffix = name.removeprefix(f"{job.metadata.name}-")
    return suffix != name and suffix.isdigit()


def _queued_for(pod_group: JSON | None, scheduler: GangScheduler, now: dt.datetime) -> float | None:
    """Seconds a Volcano PodGroup has been Pending (not admitted by its queue), or None."""
    if not scheduler.volcano or pod_group is None or (pod_group.get("status") or {}).get("phase") != "Pending":
        return None
    created = pod_group["metadata"].get("creationTimestamp")
    if not created:
        return None
    return (now - dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))).total_seconds()


def _group_says(status: JSON, scheduler: GangScheduler) -> str | None:
    """What the PodGroup's status says against it: Kubernetes' PodGroupInitiallyScheduled False (its reason and the
    scheduler's message), Volcano's Unschedulable True."""
    for cond in status.get("conditions") or []:
        if scheduler.kubernetes and cond.get("type") == podgroup.INITIALLY_SCHEDULED and cond.get("status") == "False":
            return ": ".join(str(part) for part in (cond.get("reason"), cond.get("message")) if part) or None
        if not scheduler.kubernetes and cond.get("type") == "Unschedulable" and cond.get("status") == "True":
            return str(cond.get("message") or cond.get("reason") or "") or None
    return None


def _described(spec: JSON) -> str:
    """The gang's terms, as the PodGroup states them."""
    if (gang := (spec.get("schedulingPolicy") or {}).get("gang")) is not None:
        described = f"minCount {gang['minCount']}"
        if spec.get("priorityClassName"):
            described += f", priorityClassName {spec['priorityClassName']}"
        return described
    described = f"minMember {spec['minMember']}"
    if spec.get("minResources"):
        described += ", minResources " + ", ".join(f"{k}={v}" for k, v in spec["minResources"].items())
    if spec.get("queue"):
        described += f", queue {spec['queue']}"
    return described


def why_unscheduled(job: MPIJob, observed: Observed, wanted: JSON, scheduler: GangScheduler,
                    attempt: int, now: dt.datetime) -> str | None:
    """Why the gang is held back, from the PodGroup's status and the pods' PodScheduled conditions; None if not."""
    pods = sorted(observed.pods_of_attempt(attempt), key=podstate.name)
    if not pods or any(podstate.phase(p) != "Pending" for p in pods):
        return None
    name = podgroup.pod_group_name(job, scheduler, attempt)
    group = observed.pod_group(name)
    status = ((group or {}).get("status")) or {}
    group_says = _group_says(status, scheduler)
    # Kubernetes' pods repeat their group's message ("pod group is unschedulable, ..."): quoted only when it says none.
    held = [] if scheduler.kubernetes and group_says else [
        (p, message) for p in pods if (message := podstate.unschedulable_message(p))]
    queued = _queued_for(group, scheduler, now)
    if group_says is None and queued is not None and queued >= QUEUE_GRACE_SECONDS:
        group_says = f"not admitted by queue {wanted['spec'].get('queue')} after {QUEUE_GRACE_SECONDS:.0f}s"
    if not held and not group_says:
        return None
    message = f"{scheduler.scheduler_name} has not scheduled PodGroup {name} ({_described(wanted['spec'])})"
    if status.get("phase"):
        message += f", phase {status['phase']}"
    if group_says:
        message += f": {group_says}"
    if held:
        # The scheduler's most common reason: a pod it last tried before its siblings existed may still say so.
        says = max((m for _, m in held), key=[m for _, m in held].count)
        pod = next(p for p, m in held if m == says)
        message += f"; {len(held)} of {len(pods)} pods unschedulable, {podstate.name(pod)}: {says}"
    return message[:MESSAGE_LIMIT]


def _report(plan: Plan, job: MPIJob, observed: Observed, wanted: JSON, scheduler: GangScheduler,
            now: dt.datetime) -> None:
    status = plan.status
    message = why_unscheduled(job, observed, wanted, scheduler, status.attempt, now)
    queued = _queued_for(observed.pod_group(podgroup.pod_group_name(job, scheduler, status.attempt)), scheduler, now)
    if message is None and queued is not None and queued < QUEUE_GRACE_SECONDS:
        plan.requeue_in(QUEUE_GRACE_SECONDS - queued)
    if message is None or status.is_true("Running"):
        _clear(plan)
        return
    running = status.condition("Running")
    if running is None or running.reason != UNSCHEDULABLE_REASON:
        plan.event("Warning", UNSCHEDULABLE_REASON, message)
    c.set_condition(status, "Running", "False", UNSCHEDULABLE_REASON, message, now)


def _clear(plan: Plan) -> None:
    """The gang is placed (or gone): drop the Running=False this policy wrote."""
    running = plan.status.condition("Running")
    if running is not None and running.status == "False" and running.reason == UNSCHEDULABLE_REASON:
        plan.status.conditions = [cond for cond in plan.status.conditions if cond is not running]
