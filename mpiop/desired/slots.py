"""How many MPI slots each worker offers, as the builders read them: slotsPerWorker, else the worker's GPU limit,
else 1 (desired.gpus, the one rule of which resources are GPUs).

With runLauncherAsWorker and no Worker, the launcher is the only host: its GPU limit gives the default. A worker
whose GPUs come through DRA claims reaches the builders with slotsPerWorker set: `decide` resolves its slots from the
ResourceClaimTemplates once per pass (policies.gpu_slots, desired.gpus.with_slots).
"""

from __future__ import annotations

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import gpus


def slots_per_worker(job: MPIJob) -> int:
    return gpus.limit_slots(job)
