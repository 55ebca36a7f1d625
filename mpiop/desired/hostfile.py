"""The hostfile and Horovod's discover_hosts.sh, in each MPI implementation's format."""

from __future__ import annotations

import re
from collections.abc import Iterable

from mpiop import names
from mpiop.api.v2beta1 import MPIImplementation, MPIJob
from mpiop.desired import ranks
from mpiop.desired.slots import slots_per_worker


def host_line(implementation: MPIImplementation, host: str, slots: int) -> str:
    """Open MPI: `<host> slots=N`; Intel MPI and MPICH (Hydra): `<host>:N`."""
    if implementation == "OpenMPI":
        return f"{host} slots={slots}"
    return f"{host}:{slots}"


_SLOTS_OF_LINE = re.compile(r"(?: slots=|:)(\d+)$")


def written_slots(hostfile_text: str) -> int | None:
    """The slots of a hostfile host_line wrote (its first host's: all have the same); None: no host."""
    first = next((line for line in hostfile_text.splitlines() if line.strip()), "")
    match = _SLOTS_OF_LINE.search(first.strip())
    return int(match.group(1)) if match else None


def _hosts(job: MPIJob, worker_indexes: Iterable[int], cluster_domain: str) -> list[str]:
    """The hosts by their DNS names, in the rank layout's order (desired.ranks)."""
    return [names.host_name(job, pod, cluster_domain) for pod in ranks.host_pods(job, worker_indexes)]


def _hostfile_hosts(job: MPIJob, cluster_domain: str) -> list[str]:
    """The hosts by their DNS names, but Open MPI's launcher by its own hostname (`<job>-launcher`, the pod's
    `hostname` whatever the attempt): Open MPI must take that entry for itself and start its ranks without
    ssh (the launcher runs no sshd). Open MPI 5 (PRRTE) only compares a name with its own hostname and
    addresses, so it ssh-ed to its own DNS name; Open MPI 4 resolves the name, which failed while the
    launcher's DNS record was not served yet (e2e: test_run_launcher_as_worker)."""
    hosts = _hosts(job, range(job.spec.worker_replicas), cluster_domain)
    if job.spec.run_launcher_as_worker and job.spec.effective_mpi_implementation == "OpenMPI":
        hosts[0] = names.launcher_name(job)
    return hosts


_HOSTFILES: dict[tuple[object, ...], str] = {}


def hostfile(job: MPIJob, cluster_domain: str = "") -> str:
    """Every host of the job, the launcher first when it also works.

    Kept for the last few jobs' shapes: every reconcile compares it with the ConfigMap, and at 10,000 workers
    building it is a fair share of a pass.
    """
    slots = slots_per_worker(job)
    implementation = job.spec.effective_mpi_implementation
    key = (job.metadata.namespace, job.metadata.name, job.spec.worker_replicas, bool(job.spec.run_launcher_as_worker),
           slots, implementation, cluster_domain)
    found = _HOSTFILES.get(key)
    if found is None:
        hosts = _hostfile_hosts(job, cluster_domain)
        found = "".join(f"{host_line(implementation, h, slots)}\n" for h in hosts)
        if len(_HOSTFILES) >= 64:  # decisions of big jobs run in threads: no step here may fail on a race
            _HOSTFILES.clear()
        _HOSTFILES[key] = found
    return found


DISCOVER_HOSTS_OFF = """#!/bin/sh
echo "discover_hosts.sh is not kept up to date by this operator (mpiop runs with --no-discover-hosts):" >&2
echo "use the hostfile, or ask the operator's admin for --discover-hosts (elastic Horovod needs it)" >&2
exit 1
"""
"""discover_hosts.sh under --no-discover-hosts: it never changes (no ConfigMap patch when workers come and
go), the launcher's volume keeps its key, and an elastic Horovod launcher that runs it is told why it fails."""


def discover_hosts(job: MPIJob, running_worker_indexes: Iterable[int], cluster_domain: str = "") -> str:
    """For elastic Horovod: a script that prints the hosts that are Running now, as `host:slots`."""
    slots = slots_per_worker(job)
    lines = ["#!/bin/sh"]
    lines += [f"echo {h}:{slots}" for h in _hosts(job, sorted(running_worker_indexes), cluster_domain)]
    return "\n".join(lines) + "\n"
