"""Graceful stops on the real node (issue 52): a job that checkpoints to a volume outliving its pods (a hostPath
directory) is suspended at 30 % or later and resumed, then has a worker evicted through the Eviction API at 60 % or
later (a disruption restart); each stop ends with the launcher (the ranks saved within the stop grace; under exec
launch mpirun's teardown may outlive it, the ranks having saved: EXEC_LAUNCH_ENDINGS), and each
next run's first progress report is at its checkpoint, not back at 0, its ranks saying they resumed from step N.

PyTorch DDP (e2e/images/train_checkpoint.py, progress_client's stop handler and stop notice shared by an all_reduce)
under Open MPI 4 with SSH and with exec launch, and a plain MPI program (mpi_checkpoint.py) under Intel MPI's Hydra.
The workers' PID 1 is hold-ranks.sh: an evicted worker's kubelet TERMs it at once (testkit/e2e/stopping.py).
"""

from __future__ import annotations

import time

import pytest

from testkit.e2e.exec_launch import add_passwd, restricted_exec
from testkit.e2e.session import E2E, operator_process
from testkit.e2e.stopping import (
    EXEC_LAUNCH_ENDINGS,
    Stop,
    checkpoint_dir,
    ddp_stop_job,
    intel_stop_job,
    suspend_resume_evict,
)
from testkit.e2e.training import SSH_MPIRUN

# Alone on the node: each stop must end within the 25 s grace (the ranks' checkpoint saved, mpirun gone), which a
# neighbour's ranks on the node's 2 CPUs would eat into; not a looser bound.
pytestmark = pytest.mark.node_wide

FLAGS = ("--status-write-seconds=1",)  # progress written within a second, so the test sees each run's first


def show(e2e: E2E, scenario: str, stops: list[Stop], log: str, started: float) -> None:
    e2e.record(scenario, time.monotonic() - started)
    e2e.report(f"{scenario.replace('-', '_')}_stops", [stop.line() for stop in stops])
    print(f"\n{scenario} [{e2e.suite}]:")
    for stop in stops:
        print(f"  {stop.line()}")
    print("  last launcher's log:\n    " + "\n    ".join(log.splitlines()[-12:]))


def test_ddp_over_ssh_resumes_from_its_checkpoint(bare: E2E) -> None:
    """Open MPI 4, SSH launch, mpirun with `--mca odls_base_sigkill_timeout 20`."""
    with checkpoint_dir(bare) as host_dir, operator_process(bare, *FLAGS):
        started = time.monotonic()
        stops, log = suspend_resume_evict(bare, "ddp-stop", ddp_stop_job("ddp-stop", bare.image, host_dir,
                                                                         SSH_MPIRUN), host_dir)
    show(bare, "ddp-stop-ssh", stops, log, started)


def test_ddp_under_exec_launch_resumes_from_its_checkpoint(bare: E2E, exec_images_imported: tuple[str, str]) -> None:
    """Open MPI 4 under exec launch (no sshd; kubexec.sh), as an arbitrary UID (not in a restricted namespace:
    the checkpoint volume is a hostPath)."""
    image, kubectl = exec_images_imported
    add_passwd(bare)
    with checkpoint_dir(bare) as host_dir, operator_process(bare, "--kubectl-image", kubectl, *FLAGS):
        manifest = ddp_stop_job("ddp-exec", image, host_dir, ("mpirun.openmpi",), worker_command=(),
                                shape=restricted_exec)
        started = time.monotonic()
        stops, log = suspend_resume_evict(bare, "ddp-exec", manifest, host_dir, EXEC_LAUNCH_ENDINGS)
    show(bare, "ddp-stop-exec", stops, log, started)


def test_intel_mpi_program_resumes_from_its_checkpoint(bare: E2E) -> None:
    """A plain MPI program under Intel MPI's mpiexec.hydra over SSH, checkpointing a step counter."""
    with checkpoint_dir(bare) as host_dir, operator_process(bare, *FLAGS):
        started = time.monotonic()
        stops, log = suspend_resume_evict(bare, "impi-stop", intel_stop_job("impi-stop", bare.image, host_dir),
                                          host_dir)
    show(bare, "intel-mpi-stop", stops, log, started)
