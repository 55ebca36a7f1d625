"""A plain MPI program (no framework) that checkpoints a step counter when mpiop stops the job
(e2e/test_graceful_stop.py): Intel MPI or MPICH through their shared ABI (libmpi.so.12, MPICH's handle values),
called with ctypes, since the image's mpi4py is built for Open MPI.

Each step every rank puts "stop now?" into MPI_Allreduce(MPI_MAX): its own SIGTERM (Hydra's proxies pass on
mpiexec's) or, on rank 0, the stop notice in its progress post's answer. Then rank 0 writes the step to
$CHECKPOINT_DIR/checkpoint.json and every rank exits 0; a new run starts from that step and says so.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path

import progress_client  # type: ignore[import-not-found]  # mpiop/progress_client.py, beside this script

STEPS = int(os.environ.get("TRAIN_STEPS", "100"))
STEP_SECONDS = float(os.environ.get("TRAIN_STEP_SECONDS", "0.2"))
REPORT_EVERY = 2
SUMMARY = Path(os.environ.get("CHECKPOINT_DIR", "/checkpoint")) / "checkpoint.json"
# MPICH's ABI (mpi.h of MPICH 3.x/4.x and Intel MPI): handles are ints.
COMM_WORLD, MPI_INT, MPI_MAX = 0x44000000, 0x4C000405, 0x58000001


def percent(step: int) -> int:
    return 100 * step // STEPS


def main() -> None:
    mpi = ctypes.CDLL("libmpi.so.12", mode=ctypes.RTLD_GLOBAL)
    if mpi.MPI_Init(None, None) != 0:
        sys.exit("MPI_Init failed")
    progress_client.install_stop_handler()  # after MPI_Init: nothing later takes SIGTERM back
    rank, size = ctypes.c_int(), ctypes.c_int()
    mpi.MPI_Comm_rank(COMM_WORLD, ctypes.byref(rank))
    mpi.MPI_Comm_size(COMM_WORLD, ctypes.byref(size))
    label = f"rank {rank.value}/{size.value}"

    def allreduce_max(value: int) -> int:
        mine, result = ctypes.c_int(value), ctypes.c_int()
        mpi.MPI_Allreduce(ctypes.byref(mine), ctypes.byref(result), 1, MPI_INT, MPI_MAX, COMM_WORLD)
        return result.value

    start = int(json.loads(SUMMARY.read_text())["step"]) if SUMMARY.exists() else 0
    how = f"resumed from step {start} ({percent(start)}%)" if start else "starts from step 0"
    print(f"{label} on {socket.gethostname()} {how}", flush=True)
    run = uuid.uuid4().hex[:8]
    noticed = False
    if rank.value == 0:
        answer = progress_client.report(percent(start), metrics={"step": start, "run": run})
        print(f"{label} first report {percent(start)}% (step {start}, run {run}): {answer.code}", flush=True)
    for step in range(start, STEPS):
        time.sleep(STEP_SECONDS)  # the work of a step
        done = step + 1
        if rank.value == 0 and done % REPORT_EVERY == 0 and done < STEPS:
            answer = progress_client.report(percent(done), metrics={"step": done, "run": run})
            noticed = noticed or answer.stop is not None
        signalled = progress_client.stop_requested() and not noticed  # ranks 1-3 learn only by a signal
        stop = allreduce_max(2 if signalled else 1 if noticed else 0)
        if stop and done < STEPS:
            why = "SIGTERM" if stop == 2 else "stop notice"
            if rank.value == 0:
                summary = {"step": done, "percent": percent(done), "why": why, "run": run,
                           "saved": dt.datetime.now(dt.timezone.utc).isoformat()}  # noqa: UP017
                SUMMARY.with_suffix(".partial").write_text(json.dumps(summary))
                SUMMARY.with_suffix(".partial").replace(SUMMARY)
            allreduce_max(0)  # a barrier: the checkpoint is written before any rank goes
            print(f"{label} stopped at step {done} ({percent(done)}%) on {why}: checkpoint saved", flush=True)
            mpi.MPI_Finalize()
            sys.exit(0)
    if rank.value == 0:
        answer = progress_client.report(100, metrics={"step": STEPS, "run": run})
        print(f"{label} finished {STEPS} steps: {answer.code}", flush=True)
    mpi.MPI_Finalize()


if __name__ == "__main__":
    main()
