"""Data-parallel training of a small MLP with PyTorch DistributedDataParallel, launched by mpirun in an MPIJob.

mpiop gives the launcher and every worker MASTER_ADDR (the hostfile's first host, where mpirun puts rank
0), MASTER_PORT, WORLD_SIZE and LOCAL_WORLD_SIZE, and has the launcher's MPI forward them to the ranks it
starts over SSH. RANK and LOCAL_RANK differ per rank: each rank takes them from its MPI (`mpi_identity`).
Nothing about the rendezvous is in the manifest (examples/pytorch-ddp.yaml).

The run is deterministic: a fixed synthetic regression set, fixed seeds, plain SGD on a mean loss. Step t
uses global batch t (the same indices whatever the world size); rank r trains on the r-th equal slice of
it, so DDP's averaged gradient is the gradient of the whole global batch. `--reference` runs the same steps
in one process over whole global batches: its final parameters equal every rank's, up to float rounding.

Each rank prints its loss at the first and the last step and a checksum of its final parameters: the sha256
of their float32 bytes, and 8 fixed random projections of them for a comparison within a tolerance.

Rank 0 reports its progress to mpiop after every epoch (EPOCH_STEPS steps): percent done, an ETA from the pace
so far, the loss and the epoch (`kubectl get mpijob` shows PROGRESS and ETA). It uses progress_client.py, a copy of
mpiop/progress_client.py beside this script; without it, or outside an MPIJob, nothing is reported.

    mpirun -n 4 python3 train_ddp.py           # in the launcher (2 workers x 2 slots)
    python3 train_ddp.py --reference 4         # one process, the global batches of a 4-rank run
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import socket
import time

import torch
import torch.distributed as dist

try:  # mpiop's stdlib-only progress client, copied beside this script (mpiop/progress_client.py)
    from progress_client import ProgressReporter
except ImportError:
    ProgressReporter = None
from torch import nn
from torch.nn.parallel import DistributedDataParallel

SEED = 1234
SAMPLES, FEATURES, HIDDEN = 4096, 16, 32
PER_RANK_BATCH = 32
STEPS = 300
EPOCH_STEPS = 30
LEARNING_RATE = 0.05
PROBES = 8


def mpi_identity() -> tuple[int, int, int]:
    """(rank, world size, local rank) from Open MPI's or Hydra's (Intel MPI, MPICH) own variables."""
    env = os.environ
    rank = env.get("OMPI_COMM_WORLD_RANK") or env.get("PMI_RANK") or env.get("RANK", "0")
    size = env.get("OMPI_COMM_WORLD_SIZE") or env.get("PMI_SIZE") or env.get("WORLD_SIZE", "1")
    local = env.get("OMPI_COMM_WORLD_LOCAL_RANK") or env.get("MPI_LOCALRANKID") or env.get("LOCAL_RANK", "0")
    return int(rank), int(size), int(local)


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed regression set: y = x.w + 0.5 sin(x.v), no noise (the loss can fall far)."""
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator) / FEATURES ** 0.5
    v = torch.randn(FEATURES, 1, generator=generator) / FEATURES ** 0.5
    return x, x @ w + 0.5 * torch.sin(x @ v)


def global_batch(step: int, size: int) -> torch.Tensor:
    """The indices of step `step`'s global batch: the same for any world size that splits it."""
    return torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(SEED + 1 + step))[:size]


def model() -> nn.Module:
    torch.manual_seed(SEED)  # identical initial parameters everywhere (DDP also broadcasts rank 0's)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def checksum(net: nn.Module) -> str:
    """sha256 of the parameters' float32 bytes (exact), and PROBES fixed random projections of them (to compare
    within a tolerance). A short line: mpirun interleaves long lines of different ranks mid-line."""
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).to(torch.float32).contiguous()
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    directions = torch.randn(PROBES, flat.numel(), generator=torch.Generator().manual_seed(SEED + 2),
                             dtype=torch.float64)
    probes = (directions @ flat.double() / flat.numel() ** 0.5).tolist()
    return f"sha256={digest} probes={','.join(f'{v:.9e}' for v in probes)}"


def train(net: nn.Module, rows: slice, ranks: int, label: str, report: bool = False) -> None:
    x, y = dataset()
    reporter = ProgressReporter(STEPS) if report and ProgressReporter is not None else None
    optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    pause = float(os.environ.get("TRAIN_STEP_SECONDS", "0"))  # the e2e restart test slows the first run
    first = last = 0.0
    for step in range(STEPS):
        indices = global_batch(step, PER_RANK_BATCH * ranks)[rows]
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x[indices]), y[indices])
        loss.backward()  # under DDP: gradients averaged over the ranks (gloo allreduce)
        optimizer.step()
        last = loss.item()
        if step == 0:
            first = last
            print(f"{label} first loss {first:.6f} (step 0)", flush=True)
        elif pause and step % 20 == 0:
            print(f"{label} step {step} loss {last:.6f}", flush=True)
        if pause:
            time.sleep(pause)
        if reporter is not None and (step + 1) % EPOCH_STEPS == 0:
            answer = reporter.step(step + 1, force=True, loss=f"{last:.6f}", epoch=(step + 1) // EPOCH_STEPS,
                                   epochs=STEPS // EPOCH_STEPS)
            print(f"{label} epoch {(step + 1) // EPOCH_STEPS} reported: {answer}", flush=True)
    print(f"{label} last loss {last:.6f} (step {STEPS - 1}) fell {first / last:.1f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=int, metavar="RANKS",
                        help="one process over the global batches of a RANKS-rank run")
    args = parser.parse_args()
    torch.set_num_threads(1)  # several ranks share a pod's CPUs
    if args.reference:
        net = model()
        train(net, slice(None), args.reference, "reference")
        print(f"reference params {checksum(net)}", flush=True)
        return
    rank, size, local_rank = mpi_identity()
    env = os.environ
    print(f"rank {rank}/{size} local {local_rank}/{env.get('LOCAL_WORLD_SIZE')} on {socket.gethostname()}: "
          f"MASTER_ADDR={env.get('MASTER_ADDR')} MASTER_PORT={env.get('MASTER_PORT')} "
          f"WORLD_SIZE={env.get('WORLD_SIZE')}", flush=True)
    # torch >= 2.4's env:// rendezvous asks for a libuv TCPStore unless USE_LIBUV=0, and Debian's torch 2.6
    # (trixie) is built without libuv: "use_libuv was requested but PyTorch was build without libuv support".
    # The classic store serves a few ranks as well; older torch ignores the variable.
    env.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                            timeout=dt.timedelta(minutes=5))
    net = DistributedDataParallel(model())
    train(net, slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH), size, f"rank {rank}/{size}",
          report=rank == 0)
    print(f"rank {rank}/{size} params {checksum(net.module)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
