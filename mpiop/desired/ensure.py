"""Compare what the job wants with what exists and plan the creations, updates and deletions.

Only differences are planned: a settled job plans nothing. Pods of an earlier attempt (but the failed
launcher of the last one, kept for its log), and workers beyond the wanted count, are deleted; a worker is
made again only once its predecessor of the same name is gone (and none while the attempt's launcher is
being deleted: it could still reach the new one), and each attempt's launcher (it has its own
name) only once no earlier worker remains. When the launcher comes is the launcher creation policy's to say
(policies/launcher_creation). On the host network, a pod whose port moved (a conflict) is
made again on its new port, and the launcher also waits until the ConfigMap names every host-network pod's
current port. At most MAX_POD_CREATES_PER_PASS pods are planned per pass (then the job is looked at again at
once), and the launcher only once every worker is planned, so a 10,000-worker job never holds the event loop
for a whole build of its pods. The plan keeps workers and launcher as separate creation steps (plan.CreationSteps):
the launcher is created only once its workers were, as a worker name taken by someone else's pod must keep it
from starting.
"""

from __future__ import annotations

from mpiop import names, podsnapshot, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import gpu_claims, hostnetwork, launch, launcher_rbac, objects, pods, ssh_config
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.plan import Observed, Plan

MAX_POD_CREATES_PER_PASS = 500
# A moved worker's launcher (and the worker): SIGTERM, then SIGKILL a second later; not 0, which removes the pod
# from the API before its container stops, so its successor of the same name could run beside it.
MOVED_GRACE_SECONDS = 1


def _stale(job: MPIJob, observed: Observed, state: podsnapshot.State, pod: podstate.Pod, attempt: int,
           worker_replicas: int) -> bool:
    if state.attempt != attempt:
        return not podstate.is_kept_launcher(pod, attempt)
    if state.role != names.WORKER_ROLE:
        return False
    index = observed.worker_index(job, state.name)
    return state.replica is None or index is None or index >= worker_replicas


def _moved(job: MPIJob, pod: podstate.Pod, ports: hostnetwork.Ports) -> bool:
    """A pod made with a port the table no longer gives it (it conflicted): it is made again."""
    return any(ports.by_key.get(key, port) != port for key, port in hostnetwork.pod_ports(job, pod).items())


def supporting_objects(plan: Plan, job: MPIJob, observed: Observed, ports: hostnetwork.Ports,
                       settings: Settings = DEFAULT_SETTINGS) -> None:
    """SSH Secret (or, launched by exec, the launcher's ServiceAccount, Role and RoleBinding), Service and hostfile
    ConfigMap: made even while the job is suspended, before any pod, kept until the job is deleted.

    `ports`: the attempt's host-network port table (policies/host_ports)."""
    attempt = plan.status.attempt
    exec_launch = launch.uses_exec(job, settings.default_launch)
    if exec_launch:
        launcher_access(plan, job, observed, attempt)
    elif observed.secret is None:
        plan.create_ssh_secret = True
    if observed.service is None:
        plan.creation_steps.supporting.append(objects.service(job))
    claim_template = gpu_claims.claim_template(job)  # total-GPU mode through DRA: the workers' GPUs
    if claim_template is not None:
        seen = (observed.claim_templates or {}).get(gpu_claims.template_name(job))
        if seen is None or not names.controlled_by(job, seen):  # another's: its creation is refused (squatters)
            plan.creation_steps.supporting.append(claim_template)

    workers = observed.worker_states(job, attempt)
    count = job.spec.worker_replicas
    running = [i for i, s in workers.items() if i < count and s.running]
    wanted = objects.config_map(job, running, settings.cluster_domain, ports, settings.discover_hosts, exec_launch,
                                settings.status_endpoint)
    if observed.config_map is None:
        plan.creation_steps.supporting.append(wanted)
    elif observed.config_map.get("data") != wanted["data"]:
        plan.objects_to_update.append(wanted)


def launcher_access(plan: Plan, job: MPIJob, observed: Observed, attempt: int) -> None:
    """An exec launcher's ServiceAccount, Role and RoleBinding; the Role names the attempt's pods that exist.

    The RoleBinding only once the ServiceAccount and the Role are in the cache as the job's own (launcher_rbac.own):
    one of those names held by another's object (its creation answered AlreadyExists: policies/squatters reports
    it) is never bound to, nor bound. Made in this pass, they are looked at again at once for the binding.
    A changed Role is looked at again at once: its watch event brings nothing new to the cache, and the launcher
    waits for it to name every worker (policies/launcher_creation)."""
    account = launcher_rbac.own(job, observed.service_account)
    role = launcher_rbac.own(job, observed.role)
    if account is None:
        plan.creation_steps.supporting.append(launcher_rbac.service_account(job))
    targets = launcher_rbac.exec_targets(job, observed, attempt)
    wanted = launcher_rbac.role(job, targets)
    if role is None:
        plan.creation_steps.supporting.append(wanted)
    elif (role.get("rules") or []) != wanted["rules"]:
        plan.objects_to_update.append(wanted)
        plan.requeue_in(0)
    if launcher_rbac.own(job, observed.role_binding) is None:
        if account is not None and role is not None:
            plan.creation_steps.supporting.append(launcher_rbac.role_binding(job))
        if not observed.refused:
            # Made this pass: bound, or the launcher made, the next, as their watch events bring nothing the cache
            # lacks. Not while any creation is refused (the rest of the pass is held back): that is retried on the
            # refusal's own backoff (status.replica_failure).
            plan.requeue_in(0)
    _legacy_role(plan, job, observed, targets)


def _legacy_role(plan: Plan, job: MPIJob, observed: Observed, targets: list[str]) -> None:
    """A job started before uid-derived names (an upgrade) has its launcher running as `<job>-launcher`, bound to
    the Role of that name: it keeps working, as that Role keeps naming exactly what the new one names (never a pod
    gone or another's), until the garbage collector deletes both with the job. Its next attempt's launcher runs as
    the new account."""
    legacy = launcher_rbac.own(job, observed.legacy_role)
    wanted = launcher_rbac.role(job, targets, names.legacy_launcher_account_name(job))
    if legacy is not None and (legacy.get("rules") or []) != wanted["rules"]:
        plan.objects_to_update.append(wanted)


def role_without_deleted_pods(plan: Plan, job: MPIJob, observed: Observed) -> None:
    """Exec launch: the pods this pass deletes (whichever policy planned it) leave the Role in the same pass. The
    update is sent before any deletion (controller.reconciler), so no name is granted once its pod is going: the
    name may be taken by anyone's pod as soon as it is gone, and the pod's terminating event, which the cache saw
    already as the operator's own deletion, brings no pass of its own."""
    going = {podstate.name(pod) for pod in plan.pods_to_delete}
    if not going:
        return
    for name, cached in ((names.launcher_account_name(job), launcher_rbac.own(job, observed.role)),
                         (names.legacy_launcher_account_name(job), launcher_rbac.own(job, observed.legacy_role))):
        planned = next((o for o in [*plan.creation_steps.supporting, *plan.objects_to_update]
                        if o["kind"] == "Role" and o["metadata"]["name"] == name), None)
        role = planned if planned is not None else cached
        named = launcher_rbac.granted(role)
        if role is None or not going & set(named):
            continue
        rules = launcher_rbac.role_rules([pod for pod in named if pod not in going])
        if planned is not None:
            planned["rules"] = rules
        else:
            plan.objects_to_update.append({**launcher_rbac.role(job, [], name), "rules": rules})


def job_pods(plan: Plan, job: MPIJob, observed: Observed, launcher_may_start: bool,
             ports: hostnetwork.Ports, settings: Settings = DEFAULT_SETTINGS) -> None:
    """Workers and launcher of the current attempt (the launcher once its creation policy allows); stale ones
    deleted first."""
    attempt = plan.status.attempt
    cluster_domain = settings.cluster_domain
    count = job.spec.worker_replicas
    states = list(zip(observed.states, observed.pods, strict=True))
    plan.delete_pods([p for s, p in states if _stale(job, observed, s, p, attempt, count)])
    moved = [p for s, p in states if s.attempt == attempt and _moved(job, p, ports)] if ports.by_key else []
    launcher = observed.launcher(job, attempt)
    if moved:
        # The launcher mounted the old port (its ssh would wait on it): it starts again with the new config. It ran
        # nothing yet (a worker never started), and no new worker is made until it is gone: it goes at once.
        plan.delete_pods(moved + ([launcher] if launcher is not None else []), grace_seconds=MOVED_GRACE_SECONDS)
    if launcher is not None and podstate.is_terminating(launcher):
        # Its mpirun may still run in its grace period (a shell as PID 1 ignores SIGTERM) and would reach a worker
        # made now by its name: no worker joins a launcher on its way out (kubeflow #810); its successor's do.
        return
    budget = MAX_POD_CREATES_PER_PASS
    prefix = names.worker_name(job, 0)[:-1]
    # A worker made while the launcher exists, below the count it started its ranks on, replaces one of those.
    replaces_below, launcher_uid = ((podstate.launched_workers(launcher) or 0, podstate.uid(launcher))
                                    if launcher is not None else (0, ""))
    for index in range(count):
        if observed.pod(f"{prefix}{index}") is None:
            if budget == 0:
                plan.requeue_in(0)  # the rest next pass
                return
            worker = pods.worker_pod(job, index, attempt, cluster_domain, ports, settings)
            if index < replaces_below and launcher_uid:
                worker["metadata"]["labels"][names.REPLACEMENT_LABEL] = launcher_uid
            plan.creation_steps.workers.append(worker)
            budget -= 1
    if launcher is None and launcher_may_start \
            and not _old_workers_remain(job, observed, attempt) \
            and not _old_launcher_terminating(observed, attempt) \
            and ssh_config.is_current(job, ports, observed.config_map, cluster_domain):
        plan.creation_steps.launcher.append(pods.launcher_pod(job, attempt, cluster_domain, ports, settings))
    if launch.uses_exec(job, settings.default_launch):
        _follow_with_role(plan, observed)


def _follow_with_role(plan: Plan, observed: Observed) -> None:
    """Exec launch: pods made in this pass are named in the Role only once they exist (launcher_rbac), so the job is
    looked at again at once; their own watch events bring nothing the cache does not hold already. Not while any
    creation is refused (a taken supporting name holds every pod back): that is retried on the refusal's own backoff
    (status.replica_failure)."""
    if plan.creation_steps.pods() and not observed.refused:
        plan.requeue_in(0)


def _old_launcher_terminating(observed: Observed, attempt: int) -> bool:
    """An earlier attempt's launcher is being deleted but has not finished: its mpirun may still run (for its grace
    period) and reach the new workers by the same names with the same key, so the new launcher waits for it to go
    (kubeflow #810: two launchers doing the same work)."""
    return any(s.role == names.LAUNCHER_ROLE and s.attempt != attempt and s.terminating
               and s.phase not in ("Succeeded", "Failed") for s in observed.states)


def _old_workers_remain(job: MPIJob, observed: Observed, attempt: int) -> bool:
    """An earlier attempt's worker still holds a name: the launcher waits for the workers it will reach."""
    return any((pod := observed.pod(names.worker_name(job, i))) is not None and podstate.attempt(pod) != attempt
               for i in range(job.spec.worker_replicas))
