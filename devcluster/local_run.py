"""`make run`: the operator against KUBECONFIG's cluster, or against a local cluster started for it.

- KUBECONFIG set: install the CRD there and run the operator.
- Otherwise, as root on Linux with the node's packages (`make run` installs them): the real single node of
  the e2e suite (kubelet, containerd, CNI, CoreDNS; ``node.py``) with the locally built MPI image. The
  operator starts, an Open MPI pi job runs to completion, its launcher's log is printed, and the operator
  goes on in the foreground; Ctrl-C stops it and the node. ``MPIOP_RUN_NODE=0`` skips the node.
- Otherwise: the dev control plane (`make dev-cluster`, no kubelet: pods never run) in the background,
  kept after the operator stops, so jobs and their state survive a restart of the operator.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from devcluster import background
from devcluster.binaries import kube_binary
from devcluster.install import install_crd
from mpiop import logging as mpiop_logging
from mpiop import names
from mpiop.api.v2beta1 import JobCondition, JobStatus, MPIJob
from mpiop.cli import main as cli_main
from mpiop.kube.client import MPIJOBS, PODS, KubeClient
from mpiop.process import run as run_operator
from mpiop.run_flags import add_run_arguments

PI_JOB = "pi"
PI_NAMESPACE = "default"


async def _install(kubeconfig: str) -> str:
    client = await KubeClient.connect(kubeconfig)
    try:
        await install_crd(client)
        version = await client.request("GET", "/version")
    finally:
        await client.close()
    return str(version.get("gitVersion"))


def node_possible() -> bool:
    """The real node needs root, Linux and its packages; MPIOP_RUN_NODE=0 opts out."""
    if os.environ.get("MPIOP_RUN_NODE", "1") == "0" or sys.platform != "linux" or os.geteuid() != 0:
        return False
    return all(shutil.which(tool) for tool in ("containerd", "runc", "ctr", "debootstrap"))


def final_condition(job: dict[str, Any]) -> JobCondition | None:
    """The job's Succeeded or Failed condition once it has finished (JobStatus decides what finished means)."""
    status = JobStatus.model_validate(job.get("status") or {})
    if not status.finished:
        return None
    return status.condition("Succeeded" if status.is_true("Succeeded") else "Failed")


async def run_pi(client: KubeClient, image: str, timeout: float = 600.0) -> tuple[JobCondition, str]:
    """Submit the Open MPI pi job, wait until it has finished; its final condition and launcher log."""
    from devcluster.pi_job import pi_job

    await client.create(MPIJOBS, PI_NAMESPACE, pi_job(PI_JOB, image))
    deadline = time.monotonic() + timeout
    while (condition := final_condition(job := await client.get(MPIJOBS, PI_NAMESPACE, PI_JOB))) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"MPIJob {PI_NAMESPACE}/{PI_JOB} did not finish within {timeout:.0f}s")
        await asyncio.sleep(1.0)
    launcher = names.launcher_name(MPIJob.model_validate(job), (job.get("status") or {}).get("restartCount") or 0)
    log = await client.request_raw("GET", PODS.path(PI_NAMESPACE, launcher, "log"))
    return condition, log.decode(errors="replace")


async def _on_node(kubeconfig: str, image: str, args: argparse.Namespace) -> int:
    await _install(kubeconfig)
    operator = asyncio.create_task(run_operator(args), name="operator")
    client = await KubeClient.connect(kubeconfig, qps=0)
    try:
        started = time.monotonic()
        pi = asyncio.create_task(run_pi(client, image), name="pi job")
        await asyncio.wait([operator, pi], return_when=asyncio.FIRST_COMPLETED)
        if operator.done():  # stopped (Ctrl-C) or crashed before the pi job finished
            pi.cancel()
            return operator.result()
        condition, log = pi.result()
    finally:
        await client.close()
    print(f"\nMPIJob {PI_NAMESPACE}/{PI_JOB}: {condition.type} after {time.monotonic() - started:.1f}s "
          f"({condition.reason}). The launcher's log:\n"
          + "".join(f"  | {line}\n" for line in log.splitlines())
          + f"\nThe operator keeps running; in another shell:\n  export KUBECONFIG={kubeconfig}\n"
          f"  {kube_binary('kubectl')} get mpij -A\nCtrl-C stops the operator and the node.\n", flush=True)
    return await operator


def main_on_node(argv: list[str]) -> int:
    """The real node, the operator, the pi job: a new user's first command shows MPI running through mpiop."""
    from devcluster import images
    from devcluster.node import Node

    parser = argparse.ArgumentParser(prog="make run")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    mpiop_logging.configure(args.log_format, args.log_level)
    print("Bringing up a real single-node cluster (the first run builds the binaries and the MPI image: "
          "about 20 minutes on 2 cores)...", flush=True)
    mpi = images.mpi_image()
    with Node(extra_images=[mpi]) as node:
        args.kubeconfig = str(node.kubeconfig)
        return asyncio.run(_on_node(args.kubeconfig, mpi.ref, args))


def next_steps(version: str, kubeconfig: str, kubectl: Path | str, *, local: bool) -> str:
    """What to type in another shell while the operator runs; every command in it exists (tested)."""
    return (f"\nCRD mpijobs.kubeflow.org installed on Kubernetes {version}. In another shell:\n"
            f"  export KUBECONFIG={kubeconfig}\n"
            f"  {kubectl} apply -f examples/pi-openmpi.yaml\n"
            f"  {kubectl} get mpij -w\n"
            + ("Stop the operator with Ctrl-C; the local control plane keeps running until\n"
               "  make dev-cluster-down\n" if local else "")
            + "Starting the operator (all namespaces):\n")


def main() -> int:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig and node_possible():
        return main_on_node(sys.argv[1:])
    local = not kubeconfig
    if local:
        if background.up(scheduler=True) != 0:
            return 1
        state = background.read_state()
        assert state is not None
        kubeconfig = str(state["kubeconfig"])
    kubectl = kube_binary("kubectl")
    version = asyncio.run(_install(kubeconfig))
    print(next_steps(version, kubeconfig, kubectl, local=local), flush=True)
    return cli_main(["run", "--kubeconfig", kubeconfig, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
