"""PyTorch DDP that checkpoints when mpiop stops the job, and resumes from its checkpoint (e2e/test_graceful_stop.py).

Given to the pods in a ConfigMap beside mpiop/progress_client.py (not baked into the image). A tiny model,
TRAIN_STEPS steps (default 100) of TRAIN_STEP_SECONDS (default 0.2). Rank 0 reports its progress every REPORT_EVERY
steps; each step every rank puts "stop now?" into an all_reduce (MAX): its own SIGTERM (mpirun passes the
kubelet's on) or, on rank 0, the stop notice in the progress post's answer (docs/api.md, "Checkpointing when mpiop
stops a job"). So every rank stops at the same step: rank 0 saves the model, the optimizer and the step to
$CHECKPOINT_DIR (a volume that outlives the pods), beside a JSON summary the test reads, and every rank exits 0.
A new run loads the checkpoint and says so: `rank R/N resumed from step S (P%)`; its first report is P%.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path

import progress_client  # type: ignore[import-not-found]  # mpiop/progress_client.py, beside this script
import torch  # type: ignore[import-not-found]
import torch.distributed as dist  # type: ignore[import-not-found]
from torch import nn
from torch.nn.parallel import DistributedDataParallel  # type: ignore[import-not-found]

STEPS = int(os.environ.get("TRAIN_STEPS", "100"))
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.2"))
REPORT_EVERY = 2
DIRECTORY = Path(os.environ.get("CHECKPOINT_DIR", "/checkpoint"))
MODEL, SUMMARY = DIRECTORY / "model.pt", DIRECTORY / "checkpoint.json"


def mpi_identity() -> tuple[int, int]:
    """(rank, world size) from Open MPI's or Hydra's variables."""
    env = os.environ
    rank = env.get("OMPI_COMM_WORLD_RANK") or env.get("PMI_RANK") or "0"
    size = env.get("OMPI_COMM_WORLD_SIZE") or env.get("PMI_SIZE") or "1"
    return int(rank), int(size)


def percent(step: int) -> int:
    return 100 * step // STEPS


def save(step: int, net: nn.Module, optimizer: torch.optim.Optimizer, why: str, run: str) -> None:
    """Write the checkpoint whole or not at all (a rename), then its summary."""
    partial = MODEL.with_suffix(".partial")
    torch.save({"step": step, "model": net.state_dict(), "optimizer": optimizer.state_dict()}, partial)
    partial.replace(MODEL)
    summary = {"step": step, "percent": percent(step), "why": why, "run": run,
               "saved": dt.datetime.now(dt.timezone.utc).isoformat()}  # noqa: UP017
    SUMMARY.with_suffix(".partial").write_text(json.dumps(summary))
    SUMMARY.with_suffix(".partial").replace(SUMMARY)


def main() -> None:
    rank, size = mpi_identity()
    label = f"rank {rank}/{size}"
    os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch 2.6 has no libuv TCPStore (train_ddp.py)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size,
                            timeout=dt.timedelta(minutes=3))
    progress_client.install_stop_handler()  # after the process group: nothing later takes SIGTERM back
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    start = 0
    if MODEL.exists():
        state = torch.load(MODEL)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        print(f"{label} on {socket.gethostname()} resumed from step {start} ({percent(start)}%)", flush=True)
    else:
        print(f"{label} on {socket.gethostname()} starts from step 0", flush=True)
    ddp = DistributedDataParallel(net)
    run = uuid.uuid4().hex[:8]  # tells this run's reports from the last run's in status.trainerStatus
    noticed = False
    if rank == 0:
        answer = progress_client.report(percent(start), metrics={"step": start, "run": run})
        print(f"{label} first report {percent(start)}% (step {start}, run {run}): {answer.code}", flush=True)
    for step in range(start, STEPS):
        batch = torch.Generator().manual_seed(step * size + rank)
        x = torch.randn(32, 16, generator=batch)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True).sin())
        loss.backward()  # gradients averaged over the ranks (gloo allreduce)
        optimizer.step()
        time.sleep(STEP_SECONDS)
        done = step + 1
        if rank == 0 and done % REPORT_EVERY == 0 and done < STEPS:
            answer = progress_client.report(percent(done), metrics={"step": done, "run": run,
                                                                    "loss": f"{loss.item():.5f}"})
            noticed = noticed or answer.stop is not None
        signalled = progress_client.stop_requested() and not noticed  # ranks 1-3 learn only by a signal
        stop = torch.tensor([2 if signalled else 1 if noticed else 0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if stop.item() and done < STEPS:
            why = "SIGTERM" if stop.item() == 2 else "stop notice"
            if rank == 0:
                save(done, net, optimizer, why, run)
            dist.barrier()
            print(f"{label} stopped at step {done} ({percent(done)}%) on {why}: checkpoint saved", flush=True)
            dist.destroy_process_group()
            sys.exit(0)
    if rank == 0:
        save(STEPS, net, optimizer, "finished", run)
        answer = progress_client.report(100, metrics={"step": STEPS, "run": run})
        print(f"{label} finished {STEPS} steps: {answer.code}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
