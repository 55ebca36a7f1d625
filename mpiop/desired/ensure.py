"""Compare what the job wants with what exists and plan the creations, updates and deletions.

Only differences are planned: a settled job plans nothing. Pods of an earlier attempt (but the failed
launcher of the last one, kept for its log), and workers beyond the wanted count, are deleted; a worker is
made again only once its predecessor of the same name is gone, and each attempt's launcher (it has its own
name) only once no earlier worker remains. When the launcher comes is the launcher creation policy's to say
(policies/launcher_creation); once it may, it is planned before the workers, so a big job's launcher does
not wait behind hundreds of worker creations. On the host network, a pod whose port moved (a conflict) is
made again on its new port, and the launcher also waits until the ConfigMap names every host-network pod's
current port.
"""

from __future__ import annotations

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import hostnetwork, objects, pods
from mpiop.plan import Observed, Plan


def _stale(job: MPIJob, pod: podstate.Pod, attempt: int) -> bool:
    if podstate.attempt(pod) != attempt:
        return not podstate.is_kept_launcher(pod, attempt)
    if podstate.role(pod) != names.WORKER_ROLE:
        return False
    index = names.worker_index(job, podstate.name(pod))
    return podstate.replica_index(pod) is None or index is None or index >= job.spec.worker_replicas


def _ports(job: MPIJob, observed: Observed, attempt: int, port_range: hostnetwork.PortRange) -> hostnetwork.Ports:
    return hostnetwork.ports(job, attempt, observed.pods, observed.config_map, port_range)


def _moved(job: MPIJob, pod: podstate.Pod, ports: hostnetwork.Ports) -> bool:
    """A pod made with a port the table no longer gives it (it conflicted): it is made again."""
    return any(ports.by_key.get(key, port) != port for key, port in hostnetwork.pod_ports(job, pod).items())


def supporting_objects(plan: Plan, job: MPIJob, observed: Observed, cluster_domain: str = "",
                       port_range: hostnetwork.PortRange = hostnetwork.DEFAULT_PORT_RANGE) -> None:
    """Secret, Service and hostfile ConfigMap: made even while the job is suspended, kept until it is deleted."""
    attempt = plan.status.restart_count or 0
    if observed.secret is None:
        plan.create_ssh_secret = True
    if observed.service is None:
        plan.create.append(objects.service(job))

    workers = observed.workers(job, attempt)
    running = [i for i, p in workers.items() if i < job.spec.worker_replicas and podstate.is_running(p)]
    ports = _ports(job, observed, attempt, port_range)
    wanted = objects.config_map(job, running, cluster_domain, ports)
    if observed.config_map is None:
        plan.create.append(wanted)
    elif observed.config_map.get("data") != wanted["data"]:
        plan.update.append(wanted)


def job_pods(plan: Plan, job: MPIJob, observed: Observed, launcher_may_start: bool, cluster_domain: str = "",
             port_range: hostnetwork.PortRange = hostnetwork.DEFAULT_PORT_RANGE) -> None:
    """Workers and launcher of the current attempt (the launcher once its creation policy allows); stale ones
    deleted first."""
    attempt = plan.status.restart_count or 0
    ports = _ports(job, observed, attempt, port_range)
    plan.delete_pods([p for p in observed.pods if _stale(job, p, attempt)])
    moved = [p for p in observed.pods if podstate.attempt(p) == attempt and _moved(job, p, ports)]
    if moved:
        # The launcher mounted the old port (its ssh would wait on it): it starts again with the new config.
        launcher = observed.launcher(job, attempt)
        plan.delete_pods(moved + ([launcher] if launcher is not None else []))
    if observed.launcher(job, attempt) is None and launcher_may_start \
            and not _old_workers_remain(job, observed, attempt) \
            and hostnetwork.config_current(job, ports, observed.config_map, cluster_domain):
        plan.create.append(pods.launcher_pod(job, attempt, cluster_domain, ports))
    for index in range(job.spec.worker_replicas):
        if observed.pod(names.worker_name(job, index)) is None:
            plan.create.append(pods.worker_pod(job, index, attempt, cluster_domain, ports))


def _old_workers_remain(job: MPIJob, observed: Observed, attempt: int) -> bool:
    """An earlier attempt's worker still holds a name: the launcher waits for the workers it will reach."""
    return any((pod := observed.pod(names.worker_name(job, i))) is not None and podstate.attempt(pod) != attempt
               for i in range(job.spec.worker_replicas))
