"""Host-network jobs: a host port per pod for sshd (and the framework's MASTER_PORT), and where to find it.

On the host network every pod of a node shares one port space, so sshd cannot listen on one fixed port: two
workers of a job on one node would collide. As KubeDL does for its host-network mode, each host-network pod
that runs sshd gets its own port from the operator's range (``--host-network-port-range``), declared as a
named containerPort + hostPort so the scheduler never puts two users of a port on one node. The choice is a
pure function of (job uid, pod, attempt), so a restarted operator picks the same; ports in one job never
repeat. The table of the attempt is written into the job's ConfigMap as an SSH client config
(``Host <pod names> / Port <port>``) that the launcher's MPI is pointed at; the same text is the operator's
memory of a port moved after a conflict (a Pending pod the scheduler reports as having no free ports gets
the next port of its sequence and is made again).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob

SSH_PORT_NAME = "mpiop-ssh"
MASTER_PORT_NAME = "mpiop-master"
SSH_PORT_ENV = "MPIOP_SSH_PORT"
SSH_CONFIG_NAME = "ssh_config"
SSH_CONFIG_PATH = f"{names.CONFIG_MOUNT_PATH}/{SSH_CONFIG_NAME}"
# Pods carry their ports as labels: the trimmed cache keeps labels, not specs.
SSH_PORT_LABEL = "mpiop.kubeflow.org/ssh-port"
MASTER_PORT_LABEL = "mpiop.kubeflow.org/master-port"
MASTER = "master"  # the table's key of the framework's rendezvous port (MASTER_PORT)
# kube-scheduler's NodePorts plugin, when no node has the pod's host ports free.
PORT_CONFLICT_MESSAGE = "didn't have free ports for the requested pod ports"


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
    return names.rank0_pod_name(job) if on_host_network(replica.template) else None


def master_port(job: MPIJob, ports: Ports) -> int | None:
    """MASTER_PORT for framework presets on the host network (None: the job's rank 0 is not on it)."""
    return ports.master if master_pod(job) is not None else None


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


def _label_port(pod: podstate.Pod, label: str) -> int | None:
    try:
        return int(podstate.labels(pod)[label])
    except (KeyError, ValueError):
        return None


def _key(job: MPIJob, pod: podstate.Pod) -> str:
    """A pod's key in the table: its hostname (each attempt's launcher has its own name, one hostname)."""
    return names.launcher_name(job) if podstate.role(pod) == names.LAUNCHER_ROLE else podstate.name(pod)


def pod_ports(job: MPIJob, pod: podstate.Pod) -> dict[str, int]:
    """The table entries a pod was made with (from its labels)."""
    found = {}
    if (ssh := _label_port(pod, SSH_PORT_LABEL)) is not None:
        found[_key(job, pod)] = ssh
    if (master := _label_port(pod, MASTER_PORT_LABEL)) is not None:
        found[MASTER] = master
    return found


def ports(job: MPIJob, attempt: int, pods: Iterable[podstate.Pod], config_map: dict[str, Any] | None,
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
    current = {_key(job, p): p for p in pods if podstate.attempt(p) == attempt and not podstate.is_terminating(p)}
    recorded = read_config(config_map, attempt)
    table: dict[str, int] = {}
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
            table[key] = held
            used.add(held)
    for key in wanted:
        if key not in table:
            table[key] = allocate(job, attempt, key, used, port_range, after=conflicted.get(key))
            used.add(table[key])
    return Ports(attempt, {k: table[k] for k in wanted})


# -- the SSH client config in the ConfigMap ------------------------------------------------------------------

_HEADER = re.compile(r"^# mpiop host network ports, attempt (\d+)$", re.M)
_ENTRY = re.compile(r"^# port (\S+) (\d+)$", re.M)


def host_patterns(job: MPIJob, pod_name: str, cluster_domain: str = "") -> list[str]:
    """Every name a launcher may use for the pod: bare, as in the hostfile, with and without the domain."""
    patterns = [pod_name, names.host_name(job, pod_name, cluster_domain)]
    for name in (names.host_name(job, pod_name), f"{names.host_name(job, pod_name)}.{names.DEFAULT_CLUSTER_DOMAIN}"):
        if name not in patterns:
            patterns.append(name)
    return patterns


def ssh_config(job: MPIJob, table: Ports, cluster_domain: str = "") -> str:
    """`ssh -F` text: each host-network pod's port, then the image's own client config for everything else.

    ssh takes the first value it finds, so our Port lines come before the system config (whose `Host *`
    may set a default port, 2222 in kubeflow's images), which `-F` would otherwise skip altogether.
    """
    lines = [f"# mpiop host network ports, attempt {table.attempt}",
             "# (written by mpiop from the job's pods; MPIOP_SSH_PORT in each pod is its sshd port)"]
    lines += [f"# port {key} {port}" for key, port in table.by_key.items()]
    for key, port in table.by_key.items():
        if key != MASTER:
            lines += [f"Host {' '.join(host_patterns(job, key, cluster_domain))}", f"    Port {port}"]
    lines += ["Match all", "Include /etc/ssh/ssh_config"]
    return "\n".join(lines) + "\n"


def read_config(config_map: dict[str, Any] | None, attempt: int) -> dict[str, int]:
    """The table a ConfigMap records for `attempt` (empty for another attempt, or none at all)."""
    text = ((config_map or {}).get("data") or {}).get(SSH_CONFIG_NAME) or ""
    header = _HEADER.search(text)
    if header is None or int(header.group(1)) != attempt:
        return {}
    return {key: int(port) for key, port in _ENTRY.findall(text)}


def config_current(job: MPIJob, table: Ports, config_map: dict[str, Any] | None, cluster_domain: str = "") -> bool:
    """The ConfigMap already says what `table` says: a launcher made now mounts the right ports."""
    if not table:
        return True
    data = (config_map or {}).get("data") or {}
    return bool(data.get(SSH_CONFIG_NAME) == ssh_config(job, table, cluster_domain))


# -- what a pod gets --------------------------------------------------------------------------------------------

def _add_port(container: dict[str, Any], name: str, port: int) -> None:
    declared = [p for p in container.get("ports") or [] if p.get("name") != name]
    declared.append({"name": name, "containerPort": port, "hostPort": port, "protocol": "TCP"})
    container["ports"] = declared


def add_ports(pod: dict[str, Any], job: MPIJob, table: Ports) -> int | None:
    """Declare the pod's ports on its main container and label them; returns its sshd port, if it has one."""
    name = pod["spec"].get("hostname") or pod["metadata"]["name"]  # the table's key (_key)
    main = pod["spec"]["containers"][0]
    labels = pod["metadata"]["labels"]
    ssh = table.ssh(name)
    if ssh is not None:
        _add_port(main, SSH_PORT_NAME, ssh)
        labels[SSH_PORT_LABEL] = str(ssh)
    if master_pod(job) == name and table.master is not None:
        _add_port(main, MASTER_PORT_NAME, table.master)
        labels[MASTER_PORT_LABEL] = str(table.master)
    return ssh


def extra_ssh_args(job: MPIJob) -> str:
    """Appended to the launcher's ssh arguments (plm_rsh_args, Hydra's bootstrap/launcher extra args)."""
    return f"-F {SSH_CONFIG_PATH}" if ssh_pods(job) else ""


def launcher_env(job: MPIJob) -> list[dict[str, str]]:
    """More launcher settings once ssh must find per-pod ports."""
    if not ssh_pods(job):
        return []
    implementation = job.spec.effective_mpi_implementation
    env: list[dict[str, str]] = []
    if implementation == "OpenMPI":
        # Tree spawn would have the workers' daemons ssh on to other workers, which have no client config.
        env += [{"name": "OMPI_MCA_plm_rsh_no_tree_spawn", "value": "1"},
                {"name": "PRTE_MCA_plm_ssh_no_tree_spawn", "value": "1"}]
    launcher = job.spec.launcher
    if launcher is not None and on_host_network(launcher.template) and not job.spec.run_launcher_as_worker:
        # A worker on the launcher's node resolves to one of the launcher's own addresses: Open MPI 4 files it under
        # its own node (the e2e job failed: "Please correct the hostfile"); a Hydra that compares addresses would
        # fork the worker's proxy in the launcher instead of ssh-ing to it.
        name = {"OpenMPI": "OMPI_MCA_if_base_do_not_resolve", "Intel": "I_MPI_HYDRA_BOOTSTRAP_AUTOFORK"}.get(
            implementation, "HYDRA_LAUNCHER_AUTOFORK")
        env.append({"name": name, "value": "1" if implementation == "OpenMPI" else "0"})
    return env
