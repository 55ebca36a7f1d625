"""mpiop.desired.gpus: which resources are GPUs and how many slots a worker offers, one row per case.

slotsPerWorker, else the hosts' GPUs (the first GPU limit of the Worker template's containers, or the Launcher's when
it is the only host, plus the devices its containers' per-pod DRA claims request from GPU device classes), else 1;
a count known only once allocated, or a ResourceClaimTemplate not seen, is `Unresolved`.
"""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.desired import hostfile
from mpiop.desired.gpus import (
    DEFAULT_GPU_DEVICE_CLASSES,
    Unresolved,
    container_gpus,
    gpus_per_pod,
    is_gpu_resource,
    layout_resource,
    slots_per_worker,
    with_slots,
)
from mpiop.desired.slots import slots_per_worker as builders_slots
from testkit.dra import claim_template, exactly, request
from testkit.mpijobs import MPIJobBuilder, make_mpijob

NVIDIA = "gpu.nvidia.com"
NIC = "rdma.example.com"  # a device class that is not a GPU's
TEMPLATES: dict[str, JSON] = {t["metadata"]["name"]: t for t in (
    claim_template("eight", request("gpus", exactly(NVIDIA, 8))),
    claim_template("default-count", request("gpu", exactly(NVIDIA))),
    claim_template("all", request("gpus", exactly(NVIDIA, all_devices=True))),
    claim_template("nic", request("nic", exactly(NIC, 2))),
    claim_template("mig", request("slices", exactly("mig.nvidia.com", 2))),
    claim_template("gpus-and-nic", request("gpus", exactly(NVIDIA, 4)), request("nic", exactly(NIC, 1))),
    claim_template("two-requests", request("a", exactly(NVIDIA, 2)), request("b", exactly(NVIDIA, 3))),
    claim_template("admin", request("watch", exactly(NVIDIA, 1, adminAccess=True))),
    claim_template("either-4", request("gpus", first_available=[
        exactly(NVIDIA, 4), exactly("gpu.amd.com", 4)])),
    claim_template("either-8-or-4", request("gpus", first_available=[exactly(NVIDIA, 8), exactly(NVIDIA, 4)])),
    claim_template("either-all", request("gpus", first_available=[exactly(NVIDIA, all_devices=True)])),
)}
CLASSES = DEFAULT_GPU_DEVICE_CLASSES
WAIT = "wait"
REFUSE = "refuse"
Expected = int | tuple[str, str]  # slots, or (WAIT or REFUSE, words of the message)
job = make_mpijob


@pytest.mark.parametrize(("builder", "templates", "classes", "expected"), [
    # Extended resources
    pytest.param(job("j"), TEMPLATES, CLASSES, 1, id="no-gpu-1"),
    pytest.param(job("j").slots(4), TEMPLATES, CLASSES, 4, id="slots-per-worker"),
    pytest.param(job("j").gpus(8), TEMPLATES, CLASSES, 8, id="limit-job"),
    pytest.param(job("j").gpus("4"), TEMPLATES, CLASSES, 4, id="limit-quantity-string"),
    pytest.param(job("j").gpus(2, "amd.com/gpu"), TEMPLATES, CLASSES, 2, id="amd"),
    pytest.param(job("j").gpus(3, "gpu.intel.com/gpu"), TEMPLATES, CLASSES, 3, id="other-vendor-gpu"),
    pytest.param(job("j").gpus(2, "nvidia.com/mig-1g.10gb"), TEMPLATES, CLASSES, 2, id="mig-limit-job"),
    pytest.param(job("j").gpus(1, "gpu.intel.com/i915"), TEMPLATES, CLASSES, 1, id="intel-i915-job-1"),
    pytest.param(job("j").gpus(2, "gpu.intel.com/i915"), TEMPLATES, CLASSES, 2, id="intel-i915-job"),
    pytest.param(job("j").gpus(2, "gpu.intel.com/xe"), TEMPLATES, CLASSES, 2, id="intel-xe-job"),
    pytest.param(job("j").slots(2).gpus(8), TEMPLATES, CLASSES, 2, id="slots-per-worker-beats-limit"),
    pytest.param(job("j").slots(0).gpus(8), TEMPLATES, CLASSES, 0, id="slots-per-worker-zero-kept"),
    pytest.param(job("j").gpus(0), TEMPLATES, CLASSES, 1, id="zero-gpu-ignored"),
    pytest.param(job("j").gpus("1k"), TEMPLATES, CLASSES, 1, id="non-integer-ignored"),
    pytest.param(job("j").request("Worker", "nvidia.com/gpu", 2), TEMPLATES, CLASSES, 2, id="request-only"),
    pytest.param(job("j").request("Worker", "nvidia.com/gpu", 2).gpus(4), TEMPLATES, CLASSES, 4,
                 id="limit-beats-request"),
    pytest.param(job("j").gpus(1, "amd.com/gpu").gpus(2), TEMPLATES, CLASSES, 2, id="nvidia-before-amd"),
    pytest.param(job("j").gpus(1, "b.example/gpu").gpus(5, "a.example/gpu"), TEMPLATES, CLASSES, 5,
                 id="other-vendors-sorted"),
    pytest.param(job("j").gpus(3, "nvidia.com/mig-1g.10gb").gpus(5, "x.example/gpu"), TEMPLATES, CLASSES, 5,
                 id="named-gpu-before-mig"),
    pytest.param(job("j").gpus(0).gpus(2, "amd.com/gpu"), TEMPLATES, CLASSES, 2, id="zero-nvidia-then-amd"),
    pytest.param(job("j").limit("Worker", "cpu", "4").limit("Worker", "memory", "8Gi"), TEMPLATES, CLASSES, 1,
                 id="cpu-memory-not-gpus"),
    pytest.param(job("j").limit("Worker", "nvidia.com/gpu-mem", 16), TEMPLATES, CLASSES, 1, id="gpu-prefix-not-gpu"),
    # spec.gpuResource: the stated resource alone is the GPU
    pytest.param(job("j").spec(gpuResource="nvidia.com/mig-1g.10gb").gpus(4, "nvidia.com/mig-1g.10gb"),
                 TEMPLATES, CLASSES, 4, id="gpu-resource-given"),
    pytest.param(job("j").spec(gpuResource="gpu.intel.com/i915").gpus(8).gpus(2, "gpu.intel.com/i915"),
                 TEMPLATES, CLASSES, 2, id="gpu-resource-given-not-nvidia"),
    pytest.param(job("j").spec(gpuResource="amd.com/gpu").gpus(8), TEMPLATES, CLASSES, 1,
                 id="gpu-resource-given-other-limits-ignored"),
    # The hosts: the Worker template, or the Launcher's when it is the only host
    pytest.param(job("j").gpus(8, replica="Launcher"), TEMPLATES, CLASSES, 1, id="launcher-gpus-ignored"),
    pytest.param(job("j").without("Worker"), TEMPLATES, CLASSES, 1, id="no-worker-spec"),
    pytest.param(job("j").without("Worker").launcher_as_worker().gpus(4, replica="Launcher"), TEMPLATES, CLASSES, 4,
                 id="launcher-only-host-gpus"),
    pytest.param(job("j").workers(0).launcher_as_worker().gpus(4, replica="Launcher"), TEMPLATES, CLASSES, 4,
                 id="zero-workers-launcher-gpus"),
    pytest.param(job("j").without("Worker").launcher_as_worker().gpus(4, replica="Launcher").slots(2), TEMPLATES,
                 CLASSES, 2, id="launcher-only-slots-per-worker-wins"),
    pytest.param(job("j").launcher_as_worker().gpus(4, replica="Launcher"), TEMPLATES, CLASSES, 1,
                 id="launcher-as-worker-with-workers-ignores-launcher"),
    pytest.param(job("j").launcher_as_worker().gpus(4, replica="Launcher").gpus(8), TEMPLATES, CLASSES, 8,
                 id="worker-gpus-win"),
    pytest.param(job("j").without("Worker").launcher_as_worker(), TEMPLATES, CLASSES, 1, id="launcher-only-no-gpu"),
    pytest.param(job("j").without("Worker").launcher_as_worker().claim("g", "eight", replica="Launcher"), TEMPLATES,
                 CLASSES, 8, id="launcher-only-host-claims"),
    # DRA claims
    pytest.param(job("j").claim("g", "eight"), TEMPLATES, CLASSES, 8, id="dra-exact-count-8"),
    pytest.param(job("j").claim("g", "eight", request="gpus"), TEMPLATES, CLASSES, 8, id="dra-request-named"),
    pytest.param(job("j").claim("g", "default-count"), TEMPLATES, CLASSES, 1, id="dra-default-count-1"),
    pytest.param(job("j").claim("g", "mig"), TEMPLATES, CLASSES, 2, id="dra-mig-class"),
    pytest.param(job("j").claim("g", "all"), TEMPLATES, CLASSES,
                 (REFUSE, "spec.slotsPerWorker: must be set: claim g in the Worker template (ResourceClaimTemplate "
                          "all, request gpus) asks for All devices of class gpu.nvidia.com"),
                 id="dra-all-without-slots-per-worker-error"),
    pytest.param(job("j").claim("g", "all").slots(8), TEMPLATES, CLASSES, 8, id="dra-all-slots-per-worker-given"),
    pytest.param(job("j").claim("g", "eight").slots(2), TEMPLATES, CLASSES, 2, id="slots-per-worker-wins-over-dra"),
    pytest.param(job("j").claim("g", shared="team-gpus"), TEMPLATES, CLASSES, 1, id="dra-shared-claim-adds-0"),
    pytest.param(job("j").claim("g", shared="team-gpus").gpus(2), TEMPLATES, CLASSES, 2,
                 id="dra-shared-claim-limit-kept"),
    pytest.param(job("j").claim("n", "nic"), TEMPLATES, CLASSES, 1, id="dra-non-gpu-class-adds-0"),
    pytest.param(job("j").claim("n", "nic").gpus(4), TEMPLATES, CLASSES, 4, id="dra-non-gpu-class-limit-kept"),
    pytest.param(job("j").claim("g", "gpus-and-nic"), TEMPLATES, CLASSES, 4, id="dra-gpu-requests-only"),
    pytest.param(job("j").claim("g", "two-requests"), TEMPLATES, CLASSES, 5, id="dra-whole-claim-every-request"),
    pytest.param(job("j").claim("g", "two-requests", request="b"), TEMPLATES, CLASSES, 3, id="dra-one-request-used"),
    pytest.param(job("j").claim("g", "two-requests", request="b").claim("g", "two-requests", request="b"),
                 TEMPLATES, CLASSES, 3, id="dra-request-used-twice-counted-once"),
    pytest.param(job("j").claim("g", "eight").claim("h", "mig"), TEMPLATES, CLASSES, 10, id="dra-two-claims"),
    pytest.param(job("j").claim("g", "eight").gpus(2), TEMPLATES, CLASSES, 10, id="dra-claims-plus-limits"),
    pytest.param(job("j").claim("g", "admin"), TEMPLATES, CLASSES, 1, id="dra-admin-access-adds-0"),
    pytest.param(job("j").claim("g", "either-4"), TEMPLATES, CLASSES, 4, id="dra-first-available-same-count"),
    pytest.param(job("j").claim("g", "either-8-or-4"), TEMPLATES, CLASSES,
                 (REFUSE, "spec.slotsPerWorker: must be set: claim g in the Worker template (ResourceClaimTemplate "
                          "either-8-or-4, request gpus) asks for one of firstAvailable alternatives giving 4, 8 GPUs"),
                 id="dra-first-available-counts-differ-error"),
    pytest.param(job("j").claim("g", "either-all"), TEMPLATES, CLASSES, (REFUSE, "All devices of class gpu.nvidia.com"),
                 id="dra-first-available-all-error"),
    pytest.param(job("j").claim("g", "gone"), TEMPLATES, CLASSES,
                 (WAIT, "ResourceClaimTemplate gone of claim g in the Worker template: not found"),
                 id="dra-template-not-seen-waits"),
    pytest.param(job("j").claim("g", "eight"), None, CLASSES,
                 (WAIT, "mpiop does not watch ResourceClaimTemplates"), id="dra-templates-not-watched-waits"),
    pytest.param(job("j").claim("g", "eight"), TEMPLATES, frozenset[str](), 1, id="dra-no-gpu-classes-adds-0"),
    pytest.param(job("j").claim("g", "eight"), TEMPLATES, frozenset({"other.example.com"}), 1,
                 id="dra-class-not-in-setting-adds-0"),
    pytest.param(job("j").claim("g", "gone").claim("h", "all").slots(3), None, CLASSES, 3,
                 id="slots-per-worker-needs-no-template"),
])
def test_slots_per_worker(builder: MPIJobBuilder, templates: dict[str, JSON] | None, classes: frozenset[str],
                          expected: Expected) -> None:
    found = slots_per_worker(builder.obj(), templates, classes)
    if isinstance(expected, int):
        assert found == expected
    else:
        assert isinstance(found, Unresolved), found
        assert (WAIT if found.waiting else REFUSE) == expected[0]
        assert expected[1] in found.message


@pytest.mark.parametrize(("name", "stated", "gpu"), [
    ("nvidia.com/gpu", None, True), ("amd.com/gpu", None, True), ("example.com/gpu", None, True),
    ("nvidia.com/mig-1g.10gb", None, True), ("gpu.intel.com/i915", None, True), ("gpu.intel.com/xe", None, True),
    ("gpu.intel.com/millicores", None, False), ("nvidia.com/gpu-mem", None, False), ("cpu", None, False),
    ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", False), ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb", True),
])
def test_which_resources_are_gpus(name: str, stated: str | None, gpu: bool) -> None:
    assert is_gpu_resource(name, stated) is gpu


def test_the_layout_counts_the_stated_resource_else_nvidias() -> None:
    assert layout_resource(make_mpijob("j").total_gpus(8).obj()) == "nvidia.com/gpu"
    assert layout_resource(make_mpijob("j").total_gpus(8, "nvidia.com/mig-1g.10gb").obj()) == "nvidia.com/mig-1g.10gb"


def test_a_pods_gpus_are_its_first_container_with_gpus() -> None:
    template: dict[str, Any] = {"spec": {"containers": [
        {"name": "sidecar"},
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 2}}},
        {"name": "other", "resources": {"limits": {"nvidia.com/gpu": 7}}},
    ]}}
    assert gpus_per_pod(template) == 2
    assert container_gpus(template["spec"]["containers"][2]) == 7


@pytest.mark.parametrize(
    "template",
    [{}, {"spec": {}}, {"spec": {"containers": []}}, {"spec": {"containers": [{"resources": None}]}}],
    ids=["empty", "no-containers", "empty-containers", "null-resources"],
)
def test_no_gpus(template: dict[str, Any]) -> None:
    assert gpus_per_pod(template) is None


def test_the_builders_read_the_slots_a_dra_job_resolved_to() -> None:
    """desired.slots reads limits only: the job `with_slots` gives it carries its claims' slots; any other job is
    handed on as it is (a total-GPU job still to be laid out keeps slotsPerWorker unset)."""
    dra = make_mpijob("j").claim("g", "eight").obj()
    assert builders_slots(dra) == 1
    resolved = with_slots(dra, 8)
    assert (builders_slots(resolved), dra.spec.slots_per_worker) == (8, None)
    limits = make_mpijob("j").gpus(4).obj()
    assert with_slots(limits, 4) is limits
    total = make_mpijob("j").total_gpus(8).obj()
    assert with_slots(total, 1) is total


@pytest.mark.parametrize(("text", "slots"), [
    ("pi-worker-0.pi.ns.svc slots=8\npi-worker-1.pi.ns.svc slots=8\n", 8),
    ("pi-worker-0.pi.ns.svc:4\n", 4),
    ("\npi-launcher slots=2\n", 2),
    ("", None),
])
def test_the_slots_a_written_hostfile_gives(text: str, slots: int | None) -> None:
    assert hostfile.written_slots(text) == slots
