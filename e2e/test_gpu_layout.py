"""Total-GPU mode on the real node: the node advertises 4 fake GPUs (an extended resource patched into its status,
as Kubernetes documents for advertising extended resources; no device plugin), a job states `gpus: 4` and nothing
else about its size, mpiop lays it out (one worker: the total fits the node) and writes that into the job, and Open
MPI's pi runs on the laid-out ranks: mpirun is given no -n, so the ranks are the hostfile's slots."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mpiop.names import GPU_LAYOUT_ANNOTATION
from testkit.e2e.gpus import GPU, fake_gpus, total_gpus_pi_job
from testkit.e2e.mpi import assert_pi, assert_succeeded
from testkit.e2e.session import E2E

# Node-wide: the node's status says it has 4 GPUs while it runs (test_operator_in_cluster patches them too).
pytestmark = pytest.mark.node_wide


@pytest.fixture
def four_fake_gpus(e2e: E2E) -> Iterator[None]:
    with fake_gpus(e2e.api, 4):
        yield


def test_a_total_gpu_job_runs_openmpi_pi_on_the_laid_out_ranks(e2e: E2E, four_fake_gpus: None) -> None:
    started = e2e.create_job(total_gpus_pi_job("gpus", e2e.image, 4))
    job = e2e.wait_finished("gpus")
    e2e.record("total-gpus-pi", time.monotonic() - started)
    assert_succeeded(job)
    record = job["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION]
    e2e.report("total_gpus_layout_log", record)
    assert record == "4 nvidia.com/gpu as 1 worker x 4 GPUs (slotsPerWorker 4), on nodes: 1 node with 4 nvidia.com/gpu"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1 and job["spec"]["slotsPerWorker"] == 4
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {GPU: "4"}
    log = e2e.launcher_log("gpus")
    e2e.report("total_gpus_launcher_log", log)
    assert_pi(log, "gpus", ranks=4, hosts=1)
