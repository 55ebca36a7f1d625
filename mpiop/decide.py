"""One reconcile's decisions, as a pure function of (job, observed objects, now): the design in one page.

    finished by kubeflow's operator? -> left exactly as it is
    finished?    -> TTL, clean-up (kubeflow's launcher Job too), counts; nothing else
    over --max-mpijob-kib (the cache cut it)? -> Failed ValidationError       (policies/cached_size)
    bad forward-env annotation? -> Failed ValidationError                      (policies/forward_env)
    bad exclude-failed-nodes annotation? -> Failed ValidationError             (policies/node_exclusion,
    bad launch annotation, or an exec launcher with its own account? -> Failed ValidationError (policies/launch_mode)
    a template naming an account *-launcher (an exec launcher's)? -> Failed ValidationError
                                                                      (policies/launcher_accounts)
    bad progress-deadline-seconds annotation? -> Failed ValidationError          (policies/stall)
    bad stop-grace-seconds annotation? -> Failed ValidationError               (policies/graceful_stop)
    too big?     -> Failed ValidationError
    refused?     -> Failed ValidationError (the template is wrong), else ReplicaFailure and retry
    spec.gpus, not laid out, no pod? -> the layout written into the job, or Running=False why none fits;
                    nothing else made until it is (policies/gpu_layout)
    GPUs through DRA claims? -> slots from their ResourceClaimTemplates before the hostfile is written: Running=False
                    while a template is not seen, Failed ValidationError when only slotsPerWorker can say
                    (policies/gpu_slots)
    name taken?  -> ReplicaFailure ErrResourceExists (the reconciler then starts nothing)
    (always)     -> SSH Secret (exec launch: the launcher's ServiceAccount, Role naming only this attempt's
                    pods that exist, are not terminating and the job controls, and RoleBinding once both are
                    the job's own, all named from its uid; desired.launcher_rbac), Service,
                    hostfile ConfigMap (discover_hosts.sh: the Running workers, or under --no-discover-hosts a
                    fixed script saying it is off)
    suspended?   -> pods (and kubeflow's launcher Job) deleted, Suspended
    deadline?    -> Failed DeadlineExceeded, clean-up
    kubeflow's launcher Job? -> adopted: it is the launcher of attempt 0 (success, failure, Running);
                                of a later attempt it is deleted, and the launcher Pod waits for it to go
                                (policies/adoption)
    launcher ok? -> Succeeded, clean-up                                       (policies/success)
                    (not when a wanted worker of the attempt failed, is being deleted, is gone or was made
                    again after the launcher: mpirun may exit 0 after losing it; that attempt fails below,
                    the worker blamed)
    disrupted?   -> a pod evicted or preempted: Restarting, backoffLimit not spent (policies/disruption)
    pod failed?  -> Restarting (pods deleted) or Failed (backoffLimit), clean-up (policies/failure)
    restarted in place (OnFailure)? -> counted against backoffLimit in Running, or Failed BackoffLimitExceeded
    exec launcher's kubectl image not pulled? -> Running=False KubectlImageUnavailable, Failed after a grace
                                                (policies/kubectl_image)
    attempt failed? -> its launcher's and failed pods' logs saved in <job>-attempt-<n> first (policies/evidence);
                    its node avoided by the next attempts if it failed for the node's reason (policies/node_exclusion)
    silent?      -> all ranks run but no progress within progress-deadline-seconds: Restarting or Failed
                    Stalled, every rank's log kept (policies/stall); else woken at the deadline
    otherwise    -> Running when all pods run (milestones: scheduled, ranks running, first progress;
                    status.milestones); create what is missing, the launcher when its creation policy allows
                    (policies/launcher_creation; under exec launch once the Role names every worker); update
                    the hostfile (host network: per-pod SSH ports, desired.hostnetwork)
    stopping?    -> a suspend, a disruption restart or the deadline under a stop grace: the running launcher
                    deleted first (SIGTERM to mpirun), the workers once it ended or the grace passed, no pod
                    made meanwhile; Stopping=True until then (policies/graceful_stop, last: it rewrites the
                    deletions planned above). A resumed job waits for its suspended attempt's pods to go.
    gang?        -> its PodGroup made before any pod and the new pods put in it; deleted while suspended
                    or finished (kubernetes: one per attempt, the older ones deleted); why the gang waits in
                    Running=False (policies/gang, --gang-scheduling)
    exec launch? -> the pods this pass deletes (whichever step planned it) leave the launcher's Role in the same
                    pass, sent before the deletions (desired.ensure.role_without_deleted_pods)

What the apiserver answered to the last pass's creations that failed (refused, or the name taken by an
object the job does not control) is observed like the pods are: the reconciler keeps it for the next pass.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ensure, gpus, launch
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.plan import Observed, Plan
from mpiop.policies import (
    adoption,
    cached_size,
    cleanup,
    deadline,
    disruption,
    evidence,
    failure,
    forward_env,
    gang,
    gpu_layout,
    gpu_slots,
    graceful_stop,
    host_ports,
    kubectl_image,
    launch_mode,
    launcher_accounts,
    launcher_creation,
    node_exclusion,
    refused,
    size,
    squatters,
    stall,
    success,
    suspend,
    ttl,
)
from mpiop.policies.outcome import STOP, Outcome
from mpiop.status import lifecycle, milestones


def decide(job: MPIJob, observed: Observed, now: dt.datetime, settings: Settings = DEFAULT_SETTINGS) -> Plan:
    plan = Plan(status=job.status.deep_copy())
    if adoption.finished_under_kubeflow(job):
        return plan
    lifecycle.mark_created(plan, job, now)
    slots = gpu_slots.resolve(job, observed, settings.gpu_device_classes)
    if isinstance(slots, int):  # what every builder and report reads from here on (desired.slots)
        job = gpus.with_slots(job, slots)
    _decide(plan, job, observed, now, settings, slots)
    evidence.apply(plan, job, observed, settings.kept_attempts)
    node_exclusion.apply(plan, job, observed, settings)
    if not gpu_layout.pending(plan, job, observed):  # its PodGroup is sized once the job is laid out
        gang.apply(plan, job, observed, now, settings.gang_scheduler)
    if plan.status.finished:
        cleanup.apply(plan, job, observed)
        adoption.cleanup(plan, job, observed)
        ttl.apply(plan, job, now)
    graceful_stop.apply(plan, job, observed, now, settings)
    if launch.uses_exec(job, settings.default_launch):
        ensure.role_without_deleted_pods(plan, job, observed)
    plan.status.replica_statuses = lifecycle.replica_statuses(job, lifecycle.after(observed, plan))
    return plan


def _decide(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, settings: Settings,
            slots: int | gpus.Unresolved) -> None:
    """The steps in order: the first policy that answers STOP decides the pass (policies/outcome)."""
    if plan.status.finished:
        return
    validations: list[Callable[[], Outcome]] = [
        lambda: cached_size.apply(plan, job, now, settings.max_mpijob_kib),  # first: nothing else reads a cut job
        lambda: forward_env.apply(plan, job, now),
        lambda: launch_mode.apply(plan, job, now, settings.default_launch),
        lambda: launcher_accounts.apply(plan, job, now),
        lambda: node_exclusion.refuse_bad_annotation(plan, job, now),
        lambda: stall.refuse_bad_annotation(plan, job, now),
        lambda: graceful_stop.refuse_bad_annotation(plan, job, now),
        lambda: size.apply(plan, job, now),
        lambda: refused.apply(plan, job, observed, now),
        lambda: gpu_layout.apply(plan, job, observed, now, settings.gpu_layout_max_entries),
        lambda: gpu_slots.apply(plan, job, slots, now),
        lambda: squatters.apply(plan, job, observed, now),
    ]
    if _first_stop(validations):
        return
    ensure.supporting_objects(plan, job, observed, host_ports.for_plan(plan, job, observed, settings), settings)
    if suspend.apply(plan, job, observed, now) is STOP:
        adoption.retire(plan, observed)
        return
    if plan.status.start_time is None:  # first start, or a resume: a new attempt too
        plan.status.start_time = plan.status.attempt_start_time = now
        milestones.new_attempt(plan.status)
    plan.status.attempt_start_time = plan.status.attempt_start_time or plan.status.start_time
    running: list[Callable[[], Outcome]] = [
        lambda: deadline.apply(plan, job, now),
        lambda: adoption.apply(plan, job, observed, now, settings),
        lambda: success.apply(plan, job, observed, now),
        lambda: disruption.apply(plan, job, observed, now, settings.max_disruption_restarts),
        lambda: failure.apply(plan, job, observed, now),
        lambda: kubectl_image.apply(plan, job, observed, now, settings),
    ]
    if _first_stop(running):
        return
    lifecycle.mark_running(plan, job, observed, now)
    milestones.apply(plan, job, observed, now)
    if stall.apply(plan, job, observed, now) is STOP:
        return
    node_exclusion.explain_wait(plan, job, observed, now)
    attempt = plan.status.attempt
    exec_launch = launch.uses_exec(job, settings.default_launch)
    launcher_may_start = launcher_creation.launcher_may_start(job, observed, attempt, exec_launch)
    ports = host_ports.for_plan(plan, job, observed, settings)
    ensure.job_pods(plan, job, observed, launcher_may_start, ports, settings)


def _first_stop(steps: list[Callable[[], Outcome]]) -> bool:
    """Run the steps in order until one answers STOP; whether one did."""
    return any(step() is STOP for step in steps)
