"""Framework presets: what a PyTorch-style training script reads to find its peers, on every pod of a job.

Volcano's framework plugins showed what users want from an operator: the variables each framework needs,
injected, so a training script runs unchanged. For allreduce training under mpirun these are torch's
rendezvous variables (also read by DeepSpeed, Lightning, Accelerate...):

    MASTER_ADDR       the first host of the hostfile: where mpirun places rank 0 (it maps by slot, in order)
    MASTER_PORT       DEFAULT_MASTER_PORT (torch's own default), unless the caller passes another one
    WORLD_SIZE        every slot of the job: slots per worker x (workers + the launcher if it also works)
    NPROC_PER_NODE    slots per worker (torchrun's name)
    LOCAL_WORLD_SIZE  the same (torch.distributed.elastic's name)

The user's own variables of the same names win (`env.merge_env`). RANK and LOCAL_RANK differ per rank, so
no pod-level value can be right: each rank maps its MPI identity itself (docs/api.md, examples/pytorch).
"""

from __future__ import annotations

from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ranks
from mpiop.desired.slots import slots_per_worker

# torch.distributed's default (torchrun, init_method="env://" examples): a port a script may already assume.
DEFAULT_MASTER_PORT = 29500
PRESET_NAMES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NPROC_PER_NODE", "LOCAL_WORLD_SIZE")


def first_host(job: MPIJob, cluster_domain: str = "") -> str:
    """The hostfile's first line's host: the launcher when it also works, else worker 0 (`hostfile._hosts`)."""
    return names.host_name(job, ranks.rank0_pod(job), cluster_domain)


def world_size(job: MPIJob) -> int:
    hosts = job.spec.worker_replicas + (1 if job.spec.run_launcher_as_worker else 0)
    return slots_per_worker(job) * hosts


def presets(job: MPIJob, cluster_domain: str = "", master_port: int = DEFAULT_MASTER_PORT) -> list[dict[str, str]]:
    """The preset variables, in PRESET_NAMES order.

    `master_port` is the seam for host networking, where a fixed port could collide with another job's on
    the same node: the caller passes the port allocated to the job there."""
    slots = str(slots_per_worker(job))
    values = (first_host(job, cluster_domain), str(master_port), str(world_size(job)), slots, slots)
    return [{"name": n, "value": v} for n, v in zip(PRESET_NAMES, values, strict=True)]
