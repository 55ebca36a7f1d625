"""A worker the device taint manager evicted (a NoExecute taint on one of its DRA devices, KEP-5055): a disruption,
not a failure against backoffLimit, and its node is avoided by the next attempts; the NodeExcluded Event names the
device and taint the controller read (policies/node_exclusion's `device_to_check` and `tainted_devices`)."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import NodeExclusion, TaintedDevice
from mpiop.decide import decide
from mpiop.desired.settings import Settings
from mpiop.plan import DeviceFault, Observed
from mpiop.policies import node_exclusion
from testkit.dra import device_slice, gpu, node_gpus, taint
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod, observe

DRIVER = "gpu.example.com"
EVICTED = "Device Taint manager: deleting due to NoExecute taint"  # the condition's message in v1.34
UNHEALTHY = taint("example.com/unhealthy", "true")


def base() -> MPIJobBuilder:
    return (make_mpijob("pi", "ns").workers(2).condition("Created").condition("Running")
            .run_policy(backoffLimit=0).status(start_time=at(0)))


def observed_with_eviction(reason: str = node_exclusion.DEVICE_TAINT_EVICTION) -> Observed:
    job = base().obj()
    pods = [make_pod(job, "launcher", 0).ready().on_node("n0"), make_pod(job, "worker", 0).ready().on_node("n1"),
            make_pod(job, "worker", 1).running().on_node("n2").disrupted(reason, EVICTED).terminating()]
    return observe(job, [p.obj() for p in pods])


def claim(owner_uid: str, *devices: tuple[str, str]) -> JSON:
    """A claim allocated `devices` ((pool, device)) of DRIVER, owned by the pod of `owner_uid`."""
    return {"metadata": {"name": "c", "ownerReferences": [{"kind": "Pod", "uid": owner_uid}]},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": DRIVER, "pool": pool, "device": device} for pool, device in devices]}}}}


def test_a_device_taint_eviction_is_a_disruption_that_excludes_the_node() -> None:
    job = base().obj()
    plan = decide(job, observed_with_eviction(), at(100), Settings())
    # backoffLimit 0: as a failure it would have failed the job; as a disruption it restarts it.
    assert (plan.status.restart_count, plan.status.disruptions, plan.status.excluded_nodes) == (1, 1, ["n2"])
    assert plan.status.last_failure is not None and plan.status.last_failure.reason == "DeletionByDeviceTaintManager"
    assert [e.message for e in plan.events if e.reason == "NodeExcluded"] == [
        "node n2 is excluded from MPIJob ns/pi's next attempts: pi-worker-1 failed there (DisruptionTarget "
        "DeletionByDeviceTaintManager); excluded: n2"]


def test_the_device_read_is_named_once_and_its_taint_told_in_the_event() -> None:
    job = base().obj()
    observed = observed_with_eviction()
    plan = decide(job, observed, at(100), Settings())
    check = node_exclusion.device_to_check(plan, job, observed, Settings())
    worker = observed.pod("pi-worker-1")
    assert worker is not None
    assert check == node_exclusion.DeviceCheck("pi-worker-1", podstate.uid(worker), "n2")
    gpu3 = TaintedDevice(driver=DRIVER, pool="n2", device="gpu-3", taints=["example.com/unhealthy=true:NoExecute"])
    observed.device_faults["pi-worker-1"] = DeviceFault((gpu3,))
    plan = decide(job, observed, at(100), Settings())
    assert node_exclusion.device_to_check(plan, job, observed, Settings()) is None, "read once"
    assert plan.status.node_exclusions == [NodeExclusion(
        node="n2", attempt=0, devices=[gpu3], message="pi-worker-1 failed there (DisruptionTarget "
        "DeletionByDeviceTaintManager: device gpu-3 of driver gpu.example.com tainted "
        "example.com/unhealthy=true:NoExecute)")]
    assert plan.status.to_json()["nodeExclusions"] == [{  # as stored
        "node": "n2", "attempt": 0, "message": plan.status.node_exclusions[0].message,
        "devices": [{"driver": DRIVER, "pool": "n2", "device": "gpu-3",
                     "taints": ["example.com/unhealthy=true:NoExecute"]}]}]
    assert [e.message for e in plan.events if e.reason == "NodeExcluded"] == [
        "node n2 is excluded from MPIJob ns/pi's next attempts: pi-worker-1 failed there (DisruptionTarget "
        "DeletionByDeviceTaintManager: device gpu-3 of driver gpu.example.com tainted "
        "example.com/unhealthy=true:NoExecute); excluded: n2"]


@pytest.mark.parametrize(
    ("reason", "annotation"),
    [("EvictionByEvictionAPI", None), (node_exclusion.DEVICE_TAINT_EVICTION, "false")],
    ids=["another-disruption", "exclusion-off"],
)
def test_no_device_read_for_other_disruptions_or_with_exclusion_off(reason: str, annotation: str | None) -> None:
    builder = base()
    if annotation is not None:
        builder = builder.annotation("mpiop.kubeflow.org/exclude-failed-nodes", annotation)
    job = builder.obj()
    observed = observed_with_eviction(reason)
    plan = decide(job, observed, at(100), Settings())
    assert plan.status.disruptions == 1
    assert node_exclusion.device_to_check(plan, job, observed, Settings()) is None


@pytest.mark.parametrize(
    ("claims", "slices", "told"),
    [
        ([claim("u1", ("n2", "gpu-0"), ("n2", "gpu-3"))],
         [node_gpus(DRIVER, "n2", 4, tainted={"gpu-3": UNHEALTHY, "gpu-1": UNHEALTHY})],
         "device gpu-3 of driver gpu.example.com tainted example.com/unhealthy=true:NoExecute"),
        ([claim("u1", ("n2", "gpu-0"), ("n2", "gpu-1"))],
         [node_gpus(DRIVER, "n2", 4, tainted={"gpu-0": taint("xid", effect="NoExecute"), "gpu-1": UNHEALTHY})],
         "device gpu-0 of driver gpu.example.com tainted xid:NoExecute; "
         "device gpu-1 of driver gpu.example.com tainted example.com/unhealthy=true:NoExecute"),
        ([], [node_gpus(DRIVER, "n2", 4, tainted={"gpu-2": UNHEALTHY})],
         "device gpu-2 of driver gpu.example.com on its node tainted example.com/unhealthy=true:NoExecute"),
        ([claim("u1", ("n2", "gpu-0"))], [node_gpus(DRIVER, "n2", 4, tainted={"gpu-0": taint("k", "v", "NoSchedule")})],
         ""),
        ([claim("u1", ("n2", "gpu-0"))], [node_gpus(DRIVER, "n2", 4)], ""),
        ([claim("u1", ("other-pool", "gpu-0"))], [node_gpus(DRIVER, "n2", 1, tainted={"gpu-0": UNHEALTHY})],
         "device gpu-0 of driver gpu.example.com on its node tainted example.com/unhealthy=true:NoExecute"),
    ],
    ids=["its-device", "two-of-its-devices", "claims-gone", "no-execute-only", "no-taint", "another-pool"],
)
def test_which_device_is_tainted_how(claims: list[JSON], slices: list[JSON], told: str) -> None:
    fault = node_exclusion.tainted_devices(claims, slices)
    assert (fault.describe() if fault is not None else "") == told


def rule(name: str, selector: JSON | None, effect: str = "NoExecute") -> JSON:
    spec: JSON = {"taint": {"key": "example.com/bad", "value": "true", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("rules", "told"),
    [
        ([rule("r1", {"driver": DRIVER, "pool": "n2", "device": "gpu-1"})],
         "device gpu-1 of driver gpu.example.com tainted example.com/bad=true:NoExecute (DeviceTaintRule r1)"),
        ([rule("r1", {"device": "gpu-1"})],
         "device gpu-1 of driver gpu.example.com tainted example.com/bad=true:NoExecute (DeviceTaintRule r1)"),
        ([rule("every", {})],
         "device gpu-0 of driver gpu.example.com tainted example.com/bad=true:NoExecute (DeviceTaintRule every); "
         "device gpu-1 of driver gpu.example.com tainted example.com/bad=true:NoExecute (DeviceTaintRule every)"),
        ([rule("none", None)], ""),
        ([rule("soft", {"device": "gpu-1"}, effect="NoSchedule")], ""),
        ([rule("other", {"driver": "other.example.com", "device": "gpu-1"})], ""),
        ([], ""),
    ],
    ids=["names-the-device", "device-only", "empty-selector-every-device", "no-selector-none", "no-schedule",
         "another-driver", "no-rule"],
)
def test_a_device_taint_rule_names_the_device_it_taints(rules: list[JSON], told: str) -> None:
    """DeviceTaintRules (resource.k8s.io/v1, 1.37) taint the devices their deviceSelector names: each field set
    must match; `{}` is every device, no selector none (v1.37.1)."""
    claims = [claim("u1", ("n2", "gpu-0"), ("n2", "gpu-1"))]
    fault = node_exclusion.tainted_devices(claims, [node_gpus(DRIVER, "n2", 4)], rules)
    assert (fault.describe() if fault is not None else "") == told
    assert fault is None or not fault.on_node


def test_a_rule_and_a_slice_taint_on_one_device_are_both_told() -> None:
    slices = [node_gpus(DRIVER, "n2", 2, tainted={"gpu-0": UNHEALTHY})]
    fault = node_exclusion.tainted_devices([claim("u1", ("n2", "gpu-0"))], slices, [rule("r1", {"device": "gpu-0"})])
    assert fault is not None and fault.describe() == (
        "device gpu-0 of driver gpu.example.com tainted example.com/unhealthy=true:NoExecute, "
        "example.com/bad=true:NoExecute (DeviceTaintRule r1)")


def test_a_device_with_sixteen_taints_names_the_first_few() -> None:
    """v1.37 allows 16 taints on a device (v1.34 allowed 4): the status names MAX_TAINTS_TOLD of them, in order."""
    taints = [taint(f"example.com/fault-{i}", "true") for i in range(16)]
    slices = [device_slice(DRIVER, "n2", [gpu("gpu-0", 0, taints=taints)])]
    fault = node_exclusion.tainted_devices([claim("u1", ("n2", "gpu-0"))], slices)
    assert fault is not None and len(fault.devices) == 1
    assert len(fault.devices[0].taints) == node_exclusion.MAX_TAINTS_TOLD == 4
    assert fault.describe() == ("device gpu-0 of driver gpu.example.com tainted " + ", ".join(
        f"example.com/fault-{i}=true:NoExecute" for i in range(4)))


def test_a_node_tainting_hundreds_of_devices_names_a_few_and_counts_the_rest() -> None:
    """The claims gone, every tainted device of the node would be named: the status names MAX_TAINTED_DEVICES."""
    fault = node_exclusion.tainted_devices([], [node_gpus(DRIVER, "n2", 128, tainted={
        f"gpu-{i}": UNHEALTHY for i in range(128)})])
    assert fault is not None
    assert (len(fault.devices), fault.more, fault.on_node) == (node_exclusion.MAX_TAINTED_DEVICES, 120, True)
    assert fault.describe().endswith("device gpu-7 of driver gpu.example.com on its node tainted "
                                     "example.com/unhealthy=true:NoExecute; and 120 more")
