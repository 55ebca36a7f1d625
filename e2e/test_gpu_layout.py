"""Total-GPU mode on the real node: the node advertises 4 fake GPUs (an extended resource patched into its status,
as Kubernetes documents for advertising extended resources; no device plugin), a job states `gpus: 4` and nothing
else about its size, mpiop lays it out (one worker: the total fits the node) and writes that into the job, and Open
MPI's pi runs on the laid-out ranks: mpirun is given no -n, so the ranks are the hostfile's slots."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from devcluster.nodehost import NODE_NAME
from devcluster.pi_job import SAMPLES, pi_job
from mpiop.policies.gpu_layout import ANNOTATION
from testkit.e2e.kube import wait_for
from testkit.e2e.mpi import assert_pi, assert_succeeded
from testkit.e2e.session import E2E

GPU = "nvidia.com/gpu"
NODE = f"/api/v1/nodes/{NODE_NAME}"


@pytest.fixture
def four_fake_gpus(e2e: E2E) -> Iterator[None]:
    """The node's status says it has 4 GPUs (the kubelet keeps an extended resource it does not manage); removed
    afterwards."""
    e2e.api.merge_patch(f"{NODE}/status", {"status": {"capacity": {GPU: "4"}, "allocatable": {GPU: "4"}}})
    wait_for(lambda: (e2e.api.get(NODE)["status"].get("allocatable") or {}).get(GPU) == "4", 30, "4 GPUs allocatable")
    try:
        yield
    finally:
        e2e.api.merge_patch(f"{NODE}/status", {"status": {"capacity": {GPU: None}, "allocatable": {GPU: None}}})


def test_a_total_gpu_job_runs_openmpi_pi_on_the_laid_out_ranks(e2e: E2E, four_fake_gpus: None) -> None:
    command = ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "/usr/local/bin/pi-openmpi", SAMPLES]
    manifest = pi_job("gpus", e2e.image, launcher_command=command)
    spec = manifest["spec"]
    del spec["slotsPerWorker"], spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    spec["gpus"] = 4
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("gpus")
    e2e.record("total-gpus-pi", time.monotonic() - started)
    assert_succeeded(job)
    record = job["metadata"]["annotations"][ANNOTATION]
    e2e.report("total_gpus_layout_log", record)
    assert record == "4 nvidia.com/gpu as 1 worker x 4 GPUs (slotsPerWorker 4), on nodes: 1 node with 4 nvidia.com/gpu"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1 and job["spec"]["slotsPerWorker"] == 4
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {GPU: "4"}
    log = e2e.launcher_log("gpus")
    e2e.report("total_gpus_launcher_log", log)
    assert_pi(log, "gpus", ranks=4, hosts=1)
