"""Fake GPUs on the real node: an extended resource patched into the node's status, as Kubernetes documents for
advertising extended resources (no device plugin; the kubelet keeps a resource it does not manage), and the
total-GPU pi job that runs on them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from devcluster.nodehost import NODE_NAME
from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.raw import JSON
from testkit.e2e.kube import Api, wait_for

GPU = "nvidia.com/gpu"
NODE = f"/api/v1/nodes/{NODE_NAME}"


@contextlib.contextmanager
def fake_gpus(api: Api, count: int) -> Iterator[None]:
    """The node's status says it has `count` GPUs for the block."""
    api.merge_patch(f"{NODE}/status", {"status": {"capacity": {GPU: str(count)}, "allocatable": {GPU: str(count)}}})
    wait_for(lambda: (api.get(NODE)["status"].get("allocatable") or {}).get(GPU) == str(count), 30,
             f"{count} GPUs allocatable")
    try:
        yield
    finally:
        api.merge_patch(f"{NODE}/status", {"status": {"capacity": {GPU: None}, "allocatable": {GPU: None}}})


def total_gpus_pi_job(name: str, image: str, gpus: int) -> JSON:
    """Open MPI's pi, stating only its total GPUs: no Worker.replicas, no slotsPerWorker, and mpirun given no -n,
    so the ranks are the hostfile's slots (the layout's GPUs per worker)."""
    command = ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "/usr/local/bin/pi-openmpi", SAMPLES]
    manifest = pi_job(name, image, launcher_command=command)
    spec = manifest["spec"]
    del spec["slotsPerWorker"], spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    spec["gpus"] = gpus
    return manifest
