"""The one rank layout: which pod runs which MPI ranks.

The hostfile lists the launcher first when it also works (runLauncherAsWorker), then the workers by index,
and mpirun fills those hosts in order, `slots` ranks each. `desired.hostfile` writes the hosts in this order;
`status.failure_report` reads it back: a rank named in mpirun's error is a pod, a failed pod's ranks are shown.
"""

from __future__ import annotations

from collections.abc import Iterable

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.slots import slots_per_worker


def host_pods(job: MPIJob, worker_indexes: Iterable[int]) -> list[str]:
    """The pods of these workers in hostfile order, after the launcher when it also works."""
    launcher = [names.launcher_name(job)] if job.spec.run_launcher_as_worker else []
    return launcher + [names.worker_name(job, i) for i in worker_indexes]


def rank0_pod(job: MPIJob) -> str:
    """The pod of the hostfile's first host, where rank 0 runs: the launcher when it also works, else worker 0."""
    return host_pods(job, [0])[0]


def ranks_of(job: MPIJob, pod: podstate.Pod) -> range | None:
    """The ranks mpirun puts on this pod (every attempt's launcher is the same host); None: it runs none."""
    if podstate.role(pod) == names.LAUNCHER_ROLE:
        return _ranks_at(job, 0) if job.spec.run_launcher_as_worker else None
    index = names.worker_index(job, podstate.name(pod))
    return None if index is None else worker_ranks(job, index)


def worker_ranks(job: MPIJob, index: int) -> range | None:
    """The ranks mpirun puts on worker `index` (a pod that may be gone)."""
    return _ranks_at(job, index + bool(job.spec.run_launcher_as_worker))


def _ranks_at(job: MPIJob, position: int) -> range | None:
    slots = slots_per_worker(job)
    return range(position * slots, (position + 1) * slots) if slots >= 1 else None


def pod_of_rank(job: MPIJob, rank: int) -> str | None:
    """The pod running `rank` (the launcher by its first attempt's name); None past the last host."""
    position = rank // max(slots_per_worker(job), 1)
    if job.spec.run_launcher_as_worker:
        if position == 0:
            return names.launcher_name(job)
        position -= 1
    return names.worker_name(job, position) if position < job.spec.worker_replicas else None


def ranks_text(ranks: range) -> str:
    """`2-3`, or `2` for one rank: how status.lastFailure.ranks and the failure report write them."""
    return str(ranks.start) if len(ranks) == 1 else f"{ranks.start}-{ranks[-1]}"
