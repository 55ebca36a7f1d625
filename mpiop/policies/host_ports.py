"""Which host port each host-network pod gets, and where it moves after a conflict (desired/hostnetwork).

The choice is a pure function of (job uid, pod, attempt), so a restarted operator picks the same; ports in one
job never repeat. A port a pod already holds is kept; a pod not made yet gets the one the ConfigMap records for
the attempt (desired/ssh_config), else a new one. A Pending pod the scheduler reports as having no node with
its ports free gets the next port of its own sequence (and is made again by desired/ensure), never an earlier
one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ssh_config
from mpiop.desired.hostnetwork import (
    DEFAULT_PORT_RANGE,
    MASTER,
    NO_PORTS,
    PortRange,
    Ports,
    master_pod,
    pod_ports,
    ssh_pods,
    table_key,
)
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan

# kube-scheduler's NodePorts plugin, when no node has the pod's host ports free.
PORT_CONFLICT_MESSAGE = "didn't have free ports for the requested pod ports"


def _candidate(job: MPIJob, attempt: int, key: str, k: int, port_range: PortRange) -> int:
    digest = hashlib.sha256(f"{job.metadata.uid}/{attempt}/{key}/{k}".encode()).digest()
    return port_range.first + int.from_bytes(digest[:8], "big") % port_range.size


def allocate(job: MPIJob, attempt: int, key: str, used: set[int], port_range: PortRange,
             after: int | None = None) -> int:
    """The first port of `key`'s own pseudo-random sequence that the job does not use; with `after` (a port
    that conflicted), the first one past it in the sequence, so a conflict never brings an old port back."""
    tries = 4 * port_range.size
    start = 0
    if after is not None:
        start = next((k + 1 for k in range(tries) if _candidate(job, attempt, key, k, port_range) == after), 0)
    for k in range(start, start + tries):
        port = _candidate(job, attempt, key, k, port_range)
        if port not in used and port != after:
            return port
    free = [p for p in range(port_range.first, port_range.last + 1) if p not in used and p != after]
    if not free:
        raise ValueError(f"MPIJob {job.key}: host network port range {port_range} has no free port left "
                         f"for {key} ({len(used)} ports in use by the job)")
    return free[0]


def port_conflict(pod: podstate.Pod) -> bool:
    """Pending because the scheduler found no node with the pod's host ports free."""
    return podstate.phase(pod) == "Pending" and PORT_CONFLICT_MESSAGE in podstate.unschedulable_message(pod)


def table(job: MPIJob, attempt: int, pods: Iterable[podstate.Pod], config_map: dict[str, Any] | None,
          port_range: PortRange = DEFAULT_PORT_RANGE) -> Ports:
    """The attempt's table: ports pods already hold (unless they conflicted), else the one recorded in the
    ConfigMap for this attempt, else a new one. Deterministic in its inputs."""
    wanted = list(ssh_pods(job))
    owner = {name: name for name in wanted}
    if (master := master_pod(job)) is not None:
        wanted.append(MASTER)
        owner[MASTER] = master
    if not wanted:
        return NO_PORTS
    current = {table_key(job, p): p for p in pods
               if podstate.attempt(p) == attempt and not podstate.is_terminating(p)}
    recorded = ssh_config.read(config_map, attempt)
    found: dict[str, int] = {}
    used: set[int] = set()
    conflicted: dict[str, int] = {}
    for key in wanted:
        pod = current.get(owner[key])
        held = pod_ports(job, pod).get(key) if pod is not None else recorded.get(key)
        if held is None or held in used:
            continue
        if pod is not None and port_conflict(pod):
            conflicted[key] = held
        else:
            found[key] = held
            used.add(held)
    for key in wanted:
        if key not in found:
            found[key] = allocate(job, attempt, key, used, port_range, after=conflicted.get(key))
            used.add(found[key])
    return Ports(attempt, {k: found[k] for k in wanted})


def for_plan(plan: Plan, job: MPIJob, observed: Observed, settings: Settings) -> Ports:
    """The table of the attempt the plan is at so far."""
    return table(job, plan.status.attempt, observed.pods, observed.config_map, settings.port_range)
