"""A small DeepSpeed training run (ZeRO stage 1 on NCCL) launched by mpirun in an MPIJob.

mpiop provides MASTER_ADDR, MASTER_PORT, WORLD_SIZE and LOCAL_WORLD_SIZE on every rank (forwarded by the
launcher's MPI). RANK and LOCAL_RANK come from the MPI that started this process (`mpi_identity`); with all
five set, deepspeed.init_distributed() uses them as they are.

    mpirun -n 8 python3 train_ds.py      # examples/deepspeed.yaml: 2 workers x 4 GPUs
"""

from __future__ import annotations

import os

import deepspeed
import torch
from torch import nn


def mpi_identity() -> None:
    """RANK, LOCAL_RANK and WORLD_SIZE from Open MPI's or Hydra's (Intel MPI, MPICH) own variables."""
    env = os.environ
    env["RANK"] = env.get("OMPI_COMM_WORLD_RANK") or env.get("PMI_RANK") or env.get("RANK", "0")
    env["LOCAL_RANK"] = (env.get("OMPI_COMM_WORLD_LOCAL_RANK") or env.get("MPI_LOCALRANKID")
                         or env.get("LOCAL_RANK", "0"))
    env["WORLD_SIZE"] = env.get("OMPI_COMM_WORLD_SIZE") or env.get("PMI_SIZE") or env.get("WORLD_SIZE", "1")


def main() -> None:
    mpi_identity()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    deepspeed.init_distributed(dist_backend="nccl")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1))
    config = {
        "train_micro_batch_size_per_gpu": 32,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 1},
        "bf16": {"enabled": True},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    generator = torch.Generator(device="cuda").manual_seed(1 + engine.global_rank)
    target = torch.randn(1024, 1, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    for step in range(200):
        x = torch.randn(32, 1024, device="cuda", generator=generator).to(torch.bfloat16)
        loss = nn.functional.mse_loss(engine(x).float(), x.float() @ target)
        engine.backward(loss)
        engine.step()
        if step in (0, 199):
            print(f"rank {engine.global_rank}/{engine.world_size} step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
