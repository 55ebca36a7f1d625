"""mpiop.desired.slots: slotsPerWorker, else the worker's GPU limit (the launcher's if it is the only host), else 1."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.desired.slots import gpus_per_pod, slots_per_worker
from testkit.mpijobs import MPIJobBuilder, make_mpijob


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (make_mpijob("j"), 1),
        (make_mpijob("j").slots(4), 4),
        (make_mpijob("j").slots(2).gpus(8), 2),
        (make_mpijob("j").slots(0).gpus(8), 0),
        (make_mpijob("j").gpus(8), 8),
        (make_mpijob("j").gpus("4"), 4),
        (make_mpijob("j").gpus(2, "amd.com/gpu"), 2),
        (make_mpijob("j").gpus(3, "gpu.intel.com/gpu"), 3),
        (make_mpijob("j").gpus(0), 1),
        (make_mpijob("j").gpus("1k"), 1),
        (make_mpijob("j").request("Worker", "nvidia.com/gpu", 2), 2),
        (make_mpijob("j").request("Worker", "nvidia.com/gpu", 2).gpus(4), 4),
        (make_mpijob("j").gpus(1, "amd.com/gpu").gpus(2, "nvidia.com/gpu"), 2),
        (make_mpijob("j").gpus(1, "b.example/gpu").gpus(5, "a.example/gpu"), 5),
        (make_mpijob("j").gpus(0, "nvidia.com/gpu").gpus(2, "amd.com/gpu"), 2),
        (make_mpijob("j").limit("Worker", "cpu", "4").limit("Worker", "memory", "8Gi"), 1),
        (make_mpijob("j").limit("Worker", "nvidia.com/gpu-mem", 16), 1),
        (make_mpijob("j").gpus(8, replica="Launcher"), 1),
        (make_mpijob("j").without("Worker"), 1),
        (make_mpijob("j").without("Worker").launcher_as_worker().gpus(4, replica="Launcher"), 4),
        (make_mpijob("j").workers(0).launcher_as_worker().gpus(4, replica="Launcher"), 4),
        (make_mpijob("j").without("Worker").launcher_as_worker().gpus(4, replica="Launcher").slots(2), 2),
        (make_mpijob("j").launcher_as_worker().gpus(4, replica="Launcher"), 1),
        (make_mpijob("j").launcher_as_worker().gpus(4, replica="Launcher").gpus(8), 8),
        (make_mpijob("j").without("Worker").launcher_as_worker(), 1),
    ],
    ids=[
        "default-1", "explicit", "explicit-beats-gpu", "explicit-zero-kept", "nvidia", "quantity-string", "amd",
        "other-vendor", "zero-gpu-ignored", "non-integer-ignored", "request-only", "limit-beats-request",
        "nvidia-before-amd", "other-vendors-sorted", "zero-nvidia-then-amd", "no-gpu", "gpu-prefix-not-gpu",
        "launcher-gpu-ignored", "no-worker-spec", "launcher-only-host-gpus", "zero-workers-launcher-gpus",
        "launcher-only-explicit-wins", "launcher-as-worker-with-workers-ignores-launcher", "worker-gpus-win",
        "launcher-only-no-gpu",
    ],
)
def test_slots_per_worker(job: MPIJobBuilder, expected: int) -> None:
    assert slots_per_worker(job.obj()) == expected


def test_gpus_from_first_container_with_gpus() -> None:
    template: dict[str, Any] = {"spec": {"containers": [
        {"name": "sidecar"},
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 2}}},
        {"name": "other", "resources": {"limits": {"nvidia.com/gpu": 7}}},
    ]}}
    assert gpus_per_pod(template) == 2


@pytest.mark.parametrize(
    "template",
    [{}, {"spec": {}}, {"spec": {"containers": []}}, {"spec": {"containers": [{"resources": None}]}}],
    ids=["empty", "no-containers", "empty-containers", "null-resources"],
)
def test_gpus_none(template: dict[str, Any]) -> None:
    assert gpus_per_pod(template) is None
