"""Total-GPU mode through DRA (spec.gpus with spec.gpuDeviceClassName): a node's GPUs are the devices of the job's
DeviceClass its ResourceSlices publish (policies/dra_inventory), the layout is the Worker template's claim `gpus` of
template `<job>-gpus`, which the controller makes before any pod (desired.gpu_claims)."""

from __future__ import annotations

import pytest

from mpiop.api.merge import merged
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.trims import trim_device_class, trim_resource_slice
from mpiop.decide import decide
from mpiop.desired import gpu_claims
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.plan import Observed, Plan
from mpiop.policies import dra_inventory
from mpiop.policies.dra_inventory import ClassDevices, class_devices, node_devices
from mpiop.policies.gpu_layout import NOT_WATCHED_DRA, WAITING, Dra, Layout, choose, needs_layout
from testkit.dra import device_class, resource_slice
from testkit.mpijobs import at, make_mpijob
from testkit.nodes import gpu_node, taint

NVIDIA = "gpu.nvidia.com"
NVIDIA_GPUS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
LIMIT = 1000


def selecting(*expressions: str) -> JSON:
    return {"spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


@pytest.mark.parametrize(("expressions", "expected"), [
    pytest.param(['device.driver == "gpu.nvidia.com"'], ClassDevices(NVIDIA), id="driver-double-quotes"),
    pytest.param(["device.driver=='gpu.amd.com'"], ClassDevices("gpu.amd.com"), id="driver-single-quotes"),
    pytest.param([NVIDIA_GPUS], ClassDevices(NVIDIA, "gpu"), id="nvidia-whole-gpus"),
    pytest.param(["device.driver == 'gpu.nvidia.com'", "device.attributes['gpu.nvidia.com'].type == 'mig'"],
                 ClassDevices(NVIDIA, "mig"), id="two-selectors-anded"),
    pytest.param([], "DeviceClass c: its selectors name 0 drivers", id="no-selector-every-device"),
    pytest.param(["device.driver == 'a.com' || device.driver == 'b.com'"], "not by `device.driver == 'a.com' ||",
                 id="or-refused"),
    pytest.param([NVIDIA_GPUS + " && device.attributes['gpu.nvidia.com'].productName == 'H100'"],
                 "not by `device.driver", id="another-attribute-refused"),
    pytest.param(["device.driver == 'gpu.nvidia.com' && device.attributes['other.com'].type == 'gpu'"],
                 "by the type of the driver's own domain", id="type-of-another-domain"),
    pytest.param(["device.driver == 'a.com'", "device.driver == 'b.com'"], "its selectors name 2 drivers",
                 id="two-drivers"),
])
def test_which_device_classes_are_read(expressions: list[str], expected: ClassDevices | str) -> None:
    found = class_devices("c", selecting(*expressions))
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found and found.startswith("DeviceClass c: ")
    else:
        assert found == expected


def sliced(*slices: JSON) -> list[JSON]:
    return [trim_resource_slice(s) for s in slices]


@pytest.mark.parametrize(("slices", "selected", "expected"), [
    pytest.param(sliced(resource_slice("a", NVIDIA, 8, "gpu"), resource_slice("b", NVIDIA, 4, "gpu")),
                 ClassDevices(NVIDIA, "gpu"), {"a": 8, "b": 4}, id="a-slice-per-node"),
    pytest.param(sliced(resource_slice("a", NVIDIA, 8, "gpu"), resource_slice("a", "gpu.amd.com", 8)),
                 ClassDevices(NVIDIA), {"a": 8}, id="another-driver-not-counted"),
    pytest.param(sliced(resource_slice("a", NVIDIA, 8, "gpu"), resource_slice("a", NVIDIA, 14, "mig")),
                 ClassDevices(NVIDIA, "mig"), {"a": 14}, id="by-type"),
    pytest.param([s for p in (resource_slice("a", NVIDIA, 8, "gpu"), resource_slice("a", NVIDIA, 14, "mig"))
                  for s in sliced({**p, "metadata": {"name": p["metadata"]["name"] + p["spec"]["devices"][0]["name"]},
                                   "spec": {**p["spec"], "pool": {"name": "a", "generation": 1}}})],
                 ClassDevices(NVIDIA), {"a": 22}, id="driver-only-counts-every-type"),
    pytest.param(sliced(resource_slice("a", NVIDIA, 8, "gpu", generation=1), resource_slice("a", NVIDIA, 6, "gpu",
                                                                                            generation=2)),
                 ClassDevices(NVIDIA), {"a": 6}, id="only-the-pools-latest-generation"),
    pytest.param(sliced({"spec": {"driver": NVIDIA, "allNodes": True, "pool": {"name": "net"}, "devices": [{}] * 4},
                         "metadata": {"name": "net"}}),
                 ClassDevices(NVIDIA), {}, id="no-single-node-counts-nowhere"),
])
def test_devices_by_node(slices: list[JSON], selected: ClassDevices, expected: dict[str, int]) -> None:
    assert node_devices(slices, selected) == expected


def test_a_slice_is_trimmed_to_counts_by_type_bounded() -> None:
    full = resource_slice("a", NVIDIA, 3, "gpu")
    full["spec"]["devices"] += [{"name": f"x{i}", "attributes": {f"{NVIDIA}/type": {"string": f"t{i}"}}}
                                for i in range(30)]
    trimmed = trim_resource_slice(full)
    assert trimmed["spec"]["nodeName"] == "a" and trimmed["spec"]["driver"] == NVIDIA
    devices = trimmed["spec"]["devices"]
    assert len(devices) == dra_inventory.TYPES_KEPT + 1 and devices["gpu"] == 3  # the rest under OTHER_TYPES
    assert devices[dra_inventory.OTHER_TYPES] == 30 - (dra_inventory.TYPES_KEPT - 1)
    assert sum(devices.values()) == 33


def cluster(*nodes: tuple[str, int, list[JSON]], expressions: str = NVIDIA_GPUS) -> tuple[list[JSON], Dra]:
    """Nodes (name, devices of the class, taints), without extended resources, and the class's slices."""
    made = [gpu_node(name, 0, taints=taints) for name, _, taints in nodes]
    for node in made:
        node["status"]["allocatable"].pop("nvidia.com/gpu")
    slices = sliced(*(resource_slice(name, NVIDIA, n, "gpu") for name, n, _ in nodes),
                    *(resource_slice(name, NVIDIA, 7, "mig") for name, _, _ in nodes))  # not of the class
    classes = {NVIDIA: trim_device_class({**device_class(NVIDIA), **selecting(expressions)})}
    return made, Dra(slices, classes)


def dra_job(gpus: int) -> MPIJob:
    return make_mpijob("big", "ns").total_gpus(gpus, device_class=NVIDIA).obj()


FOUR_EIGHTS: list[tuple[str, int, list[JSON]]] = [(f"n{i}", 8, []) for i in range(4)]


@pytest.mark.parametrize(("nodes", "total", "expected"), [
    pytest.param(FOUR_EIGHTS, 32, Layout(4, 8), id="32-on-four-8s"),
    pytest.param(FOUR_EIGHTS, 12, Layout(3, 4), id="12-on-8s-3x4"),
    pytest.param([*FOUR_EIGHTS, ("t", 8, [taint("dedicated", "x")])], 40,
                 "no layout of 40 gpu.nvidia.com devices fits the nodes the Worker template may run on (4 nodes with "
                 "8 gpu.nvidia.com devices; left out: 1 node with 8 gpu.nvidia.com devices (1 taint not tolerated)): "
                 "they have 32 in all, fewer than 40", id="tainted-left-out"),
    pytest.param([], 8, "no layout of 8 gpu.nvidia.com devices fits the nodes the Worker template may run on (no node "
                 "with gpu.nvidia.com devices): no node has any", id="no-devices"),
])
def test_layout_on_slices(nodes: list[tuple[str, int, list[JSON]]], total: int, expected: Layout | str) -> None:
    made, dra = cluster(*nodes)
    chosen = choose(dra_job(total), made, LIMIT, dra)
    assert (chosen if isinstance(chosen, str) else chosen[0]) == expected


@pytest.mark.parametrize(("dra", "expected"), [
    pytest.param(None, NOT_WATCHED_DRA, id="not-watched"),
    pytest.param(Dra([], {}), "spec.gpuDeviceClassName: DeviceClass gpu.nvidia.com not found", id="no-class"),
    pytest.param(Dra([], {NVIDIA: trim_device_class({**device_class(NVIDIA), **selecting("device.capacity > 1")})}),
                 "DeviceClass gpu.nvidia.com: mpiop counts only devices selected as", id="class-not-read"),
])
def test_without_what_it_counts_the_job_waits_saying_why(dra: Dra | None, expected: str) -> None:
    chosen = choose(dra_job(8), [], LIMIT, dra)
    assert isinstance(chosen, str) and chosen.startswith(expected)


def decided(job: MPIJob, dra: Dra, nodes: list[JSON], templates: dict[str, JSON] | None = None) -> Plan:
    return decide(job, Observed(nodes=nodes, resource_slices=dra.slices, device_classes=dict(dra.classes or {}),
                                claim_templates=templates if templates is not None else {}), at(0))


def test_32_devices_on_four_8_device_nodes_are_written_as_4_workers_claiming_8_then_the_template_comes_first() -> None:
    made, dra = cluster(*FOUR_EIGHTS)
    job = dra_job(32)
    plan = decided(job, dra, made)
    assert plan.mpijob_patch is not None and not plan.creation_steps.all()
    record = ("32 gpu.nvidia.com devices as 4 workers x 8 GPUs (slotsPerWorker 8), on nodes: 4 nodes with 8 "
              "gpu.nvidia.com devices")
    body = plan.mpijob_patch.body
    assert body["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION] == record and body["spec"]["slotsPerWorker"] == 8
    template = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert template["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "big-gpus"}]
    assert template["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}
    assert body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4

    laid_out = MPIJob.model_validate(merged(job.to_json(), body))
    assert not needs_layout(laid_out)
    wanted = gpu_claims.claim_template(laid_out)
    assert wanted is not None and wanted["metadata"]["name"] == "big-gpus"
    assert wanted["metadata"]["ownerReferences"][0]["uid"] == laid_out.metadata.uid
    assert wanted["spec"] == {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": 8}}]}}}
    first = decided(laid_out, dra, made)  # the template before any pod, in the supporting step
    assert wanted in first.creation_steps.supporting and first.mpijob_patch is None
    assert len(first.creation_steps.workers) == 4
    ours = decided(laid_out, dra, made, {"big-gpus": wanted})
    assert not [o for o in ours.creation_steps.all() if o["kind"] == "ResourceClaimTemplate"]
    someone_elses = {**wanted, "metadata": {**wanted["metadata"], "ownerReferences": []}}
    taken = decided(laid_out, dra, made, {"big-gpus": someone_elses})  # created anyway: refused, reported as taken
    assert wanted in taken.creation_steps.supporting


def test_a_job_whose_user_names_the_claim_is_laid_out_by_them() -> None:
    job = (make_mpijob("big", "ns").total_gpus(16, device_class=NVIDIA).workers(2)
           .claim("gpus", template="mine").obj())
    assert not needs_layout(job) and gpu_claims.claim_template(job) is None


def test_without_slices_watched_the_job_waits_saying_so() -> None:
    plan = decide(dra_job(8), Observed(nodes=[]), at(0))
    running = plan.status.condition("Running")
    assert running is not None and running.reason == WAITING and NOT_WATCHED_DRA in str(running.message)
