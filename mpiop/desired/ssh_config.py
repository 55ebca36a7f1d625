"""The host-network SSH client config in the job's ConfigMap: written for the launcher, read back by mpiop.

The launcher's MPI is pointed at it (``ssh -F``, desired/env) so ssh finds each host-network pod's sshd port.
The same text is the operator's memory of the attempt's port table (a port moved after a conflict is not on any
pod yet), so it also carries the table in comment lines that `read` parses.
"""

from __future__ import annotations

import re
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.hostnetwork import MASTER, SSH_PORT_ENV, Ports

NAME = "ssh_config"
PATH = f"{names.CONFIG_MOUNT_PATH}/{NAME}"
_HEADER = re.compile(r"^# mpiop host network ports, attempt (\d+)$", re.M)
_ENTRY = re.compile(r"^# port (\S+) (\d+)$", re.M)


def host_patterns(job: MPIJob, pod_name: str, cluster_domain: str = "") -> list[str]:
    """Every name a launcher may use for the pod: bare, as in the hostfile, with and without the domain."""
    patterns = [pod_name, names.host_name(job, pod_name, cluster_domain)]
    for name in (names.host_name(job, pod_name), f"{names.host_name(job, pod_name)}.{names.DEFAULT_CLUSTER_DOMAIN}"):
        if name not in patterns:
            patterns.append(name)
    return patterns


def render(job: MPIJob, table: Ports, cluster_domain: str = "") -> str:
    """`ssh -F` text: each host-network pod's port, then the image's own client config for everything else.

    ssh takes the first value it finds, so our Port lines come before the system config (whose `Host *`
    may set a default port, 2222 in kubeflow's images), which `-F` would otherwise skip altogether.
    """
    lines = [f"# mpiop host network ports, attempt {table.attempt}",
             f"# (written by mpiop from the job's pods; {SSH_PORT_ENV} in each pod is its sshd port)"]
    lines += [f"# port {key} {port}" for key, port in table.by_key.items()]
    for key, port in table.by_key.items():
        if key != MASTER:
            lines += [f"Host {' '.join(host_patterns(job, key, cluster_domain))}", f"    Port {port}"]
    lines += ["Match all", "Include /etc/ssh/ssh_config"]
    return "\n".join(lines) + "\n"


def read(config_map: dict[str, Any] | None, attempt: int) -> dict[str, int]:
    """The table a ConfigMap records for `attempt` (empty for another attempt, or none at all)."""
    text = ((config_map or {}).get("data") or {}).get(NAME) or ""
    header = _HEADER.search(text)
    if header is None or int(header.group(1)) != attempt:
        return {}
    return {key: int(port) for key, port in _ENTRY.findall(text)}


def is_current(job: MPIJob, table: Ports, config_map: dict[str, Any] | None, cluster_domain: str = "") -> bool:
    """The ConfigMap already says what `table` says: a launcher made now mounts the right ports."""
    if not table:
        return True
    data = (config_map or {}).get("data") or {}
    return bool(data.get(NAME) == render(job, table, cluster_domain))
