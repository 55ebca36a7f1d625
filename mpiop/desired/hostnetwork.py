"""Host-network jobs: a host port per pod for sshd (and the framework's MASTER_PORT), and how a pod declares it.

On the host network every pod of a node shares one port space, so sshd cannot listen on one fixed port: two
workers of a job on one node would collide. As KubeDL does for its host-network mode, each host-network pod
that runs sshd gets its own port from the operator's range (``--host-network-port-range``), declared as a
named containerPort + hostPort so the scheduler never puts two users of a port on one node. Here: who gets a
port, the attempt's table, and what a pod made from it carries. Which port each gets, and the move after a
conflict, is policies/host_ports; the SSH client config that tells the launcher is desired/ssh_config; the
launcher's per-MPI settings for it are desired/env.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ranks

SSH_PORT_NAME = "mpiop-ssh"
MASTER_PORT_NAME = "mpiop-master"
SSH_PORT_ENV = "MPIOP_SSH_PORT"
# Pods carry their ports as labels (names.SSH_PORT_LABEL, names.MASTER_PORT_LABEL): the trimmed cache keeps labels.
MASTER = "master"  # the table's key of the framework's rendezvous port (MASTER_PORT)


@dataclass(frozen=True)
class PortRange:
    first: int = 20000
    last: int = 30000

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= 65535:
            raise ValueError(f"host network port range {self.first}-{self.last}: need 1 <= first <= last <= 65535")

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """`20000-30000` (both ends included)."""
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
        if match is None:
            raise ValueError(f"host network port range {text!r}: expected FIRST-LAST, e.g. 20000-30000")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.first <= port <= self.last

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


DEFAULT_PORT_RANGE = PortRange()


@dataclass(frozen=True)
class Ports:
    """One attempt's port table: pod name -> sshd port, and MASTER -> the framework's rendezvous port."""

    attempt: int = 0
    by_key: Mapping[str, int] = field(default_factory=dict)

    def ssh(self, pod_name: str) -> int | None:
        return self.by_key.get(pod_name)

    @property
    def master(self) -> int | None:
        return self.by_key.get(MASTER)

    def __bool__(self) -> bool:
        return bool(self.by_key)


NO_PORTS = Ports()


def on_host_network(template: dict[str, Any] | None) -> bool:
    return bool(((template or {}).get("spec") or {}).get("hostNetwork"))


def ssh_pods(job: MPIJob) -> list[str]:
    """The pods that run sshd on the host network: host-network workers, and a host-network launcher that also
    works (it is in the hostfile); in a fixed order, the order ports are handed out in."""
    pods = []
    launcher, worker = job.spec.launcher, job.spec.worker
    if job.spec.run_launcher_as_worker and launcher is not None and on_host_network(launcher.template):
        pods.append(names.launcher_name(job))
    if worker is not None and on_host_network(worker.template):
        pods += [names.worker_name(job, i) for i in range(job.spec.worker_replicas)]
    return pods


def master_pod(job: MPIJob) -> str | None:
    """Rank 0's pod (the hostfile's first host), when it is on the host network: it binds MASTER_PORT."""
    replica = job.spec.launcher if job.spec.run_launcher_as_worker else job.spec.worker
    if replica is None or (not job.spec.run_launcher_as_worker and job.spec.worker_replicas == 0):
        return None
    return ranks.rank0_pod(job) if on_host_network(replica.template) else None


def master_port(job: MPIJob, ports: Ports) -> int | None:
    """MASTER_PORT for framework presets on the host network (None: the job's rank 0 is not on it)."""
    return ports.master if master_pod(job) is not None else None


def _label_port(pod: podstate.Pod, label: str) -> int | None:
    try:
        return int(podstate.labels(pod)[label])
    except (KeyError, ValueError):
        return None


def table_key(job: MPIJob, pod: podstate.Pod) -> str:
    """A pod's key in the table: its hostname (each attempt's launcher has its own name, one hostname)."""
    return names.launcher_name(job) if podstate.role(pod) == names.LAUNCHER_ROLE else podstate.name(pod)


def pod_ports(job: MPIJob, pod: podstate.Pod) -> dict[str, int]:
    """The table entries a pod was made with (from its labels)."""
    found = {}
    if (ssh := _label_port(pod, names.SSH_PORT_LABEL)) is not None:
        found[table_key(job, pod)] = ssh
    if (master := _label_port(pod, names.MASTER_PORT_LABEL)) is not None:
        found[MASTER] = master
    return found


# -- what a pod gets --------------------------------------------------------------------------------------------

def _add_port(container: dict[str, Any], name: str, port: int) -> None:
    declared = [p for p in container.get("ports") or [] if p.get("name") != name]
    declared.append({"name": name, "containerPort": port, "hostPort": port, "protocol": "TCP"})
    container["ports"] = declared


def add_ports(pod: dict[str, Any], job: MPIJob, table: Ports) -> int | None:
    """Declare the pod's ports on its main container and label them; returns its sshd port, if it has one."""
    name = pod["spec"].get("hostname") or pod["metadata"]["name"]  # the table's key (table_key)
    main = pod["spec"]["containers"][0]
    labels = pod["metadata"]["labels"]
    ssh = table.ssh(name)
    if ssh is not None:
        _add_port(main, SSH_PORT_NAME, ssh)
        labels[names.SSH_PORT_LABEL] = str(ssh)
    if master_pod(job) == name and table.master is not None:
        _add_port(main, MASTER_PORT_NAME, table.master)
        labels[names.MASTER_PORT_LABEL] = str(table.master)
    return ssh
