"""Rank -> pod through the job's hostfile, as mpirun fills it: hosts in order, `slots` ranks each (pure).

The hostfile is read from the job's ConfigMap, not rebuilt, so the answer is what the launcher was given. Open
MPI writes `host slots=N`, Intel MPI and MPICH `host:N`; a host is a pod's DNS name (`<pod>.<svc>.<ns>.svc`),
or Open MPI's launcher by its hostname `<job>-launcher`, whatever the attempt's launcher pod is called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN_MPI = re.compile(r"^(\S+)\s+slots=(\d+)")
_HYDRA = re.compile(r"^([^\s:]+):(\d+)$")


class RankError(ValueError):
    """A rank the hostfile has no slot for (or no hostfile at all)."""


@dataclass(frozen=True)
class Host:
    pod: str  # the pod's name, as the current attempt calls it
    first_rank: int
    slots: int

    @property
    def ranks(self) -> str:
        last = self.first_rank + self.slots - 1
        return str(self.first_rank) if last == self.first_rank else f"{self.first_rank}-{last}"


def hosts(hostfile: str, launcher_host: str, launcher_pod: str) -> list[Host]:
    """The hostfile's hosts with the ranks mpirun gives them; `launcher_host` (`<job>-launcher`) stands for
    `launcher_pod`, the attempt's launcher."""
    out: list[Host] = []
    rank = 0
    for line in hostfile.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _OPEN_MPI.match(line) or _HYDRA.match(line)
        host, slots = (match.group(1), int(match.group(2))) if match else (line.split()[0], 1)
        pod = host.split(".", 1)[0]
        out.append(Host(launcher_pod if pod == launcher_host else pod, rank, slots))
        rank += slots
    return out


def pod_of_rank(all_hosts: list[Host], rank: int) -> Host:
    """The host rank `rank` runs on, or RankError naming the ranks there are."""
    for host in all_hosts:
        if host.first_rank <= rank < host.first_rank + host.slots:
            return host
    total = sum(h.slots for h in all_hosts)
    there = f"ranks 0-{total - 1}" if total else "no ranks"
    raise RankError(f"rank {rank} is not in the hostfile ({there})")
