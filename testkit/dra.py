"""Dynamic Resource Allocation objects (resource.k8s.io/v1) for tests: DeviceClasses, ResourceClaimTemplates, the
ResourceSlices a driver would publish (with device taints, KEP-5055) and DeviceTaintRules, as plain JSON, in the v1
schema (a request is `exactly` one device class's devices, or `firstAvailable` of alternatives)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mpiop.api.raw import JSON
from mpiop.kube.client import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    KubeClient,
)

__all__ = ["DEVICE_CLASSES", "DEVICE_TAINT_RULES", "RESOURCE_SLICES",
           "claim_template", "device_class", "device_class_made", "exactly",
           "request", "resource_slice"]
NVIDIA = "gpu.nvidia.com"  # NVIDIA's DRA driver's class of whole GPUs, one of --gpu-device-classes' defaults


def device_class(name: str) -> JSON:
    """A DeviceClass selecting the devices of the driver of the same name (NVIDIA's `gpu.nvidia.com` is so)."""
    return {"apiVersion": DEVICE_CLASSES.api_version, "kind": DEVICE_CLASSES.kind, "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}}


@contextlib.asynccontextmanager
async def device_class_made(kube: KubeClient, name: str = NVIDIA) -> AsyncIterator[str]:
    """DeviceClass `name` while the block runs: cluster-wide, so made if missing (another module's may be there)
    and removed afterwards."""
    with contextlib.suppress(ApiError):
        await kube.create(DEVICE_CLASSES, None, device_class(name))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(DEVICE_CLASSES, None, name)


def resource_slice(node: str, driver: str, devices: int, device_type: str | None = None, generation: int = 0) -> JSON:
    """The ResourceSlice a DRA driver publishes for a node: `devices` devices (of `type` `device_type`, if set), the
    node's pool of the driver's alone."""
    attributes: JSON = {"type": {"string": device_type}} if device_type is not None else {}
    return {"apiVersion": RESOURCE_SLICES.api_version, "kind": RESOURCE_SLICES.kind,
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{i}", **({"attributes": attributes} if attributes else {})}
                                 for i in range(devices)]}}


def exactly(device_class_name: str, count: int | None = None, all_devices: bool = False, **more: Any) -> JSON:
    """One request's devices: `count` of the class (ExactCount, the default; None: the default count, 1), or all."""
    found: JSON = {"deviceClassName": device_class_name, **more}
    if all_devices:
        found["allocationMode"] = "All"
    elif count is not None:
        found.update(allocationMode="ExactCount", count=count)
    return found


def claim_template(name: str, *requests: JSON, namespace: str | None = None) -> JSON:
    """A ResourceClaimTemplate with these requests (`request(...)`)."""
    metadata: JSON = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": RESOURCE_CLAIM_TEMPLATES.api_version, "kind": RESOURCE_CLAIM_TEMPLATES.kind,
            "metadata": metadata, "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def request(name: str, one: JSON | None = None, first_available: list[JSON] | None = None) -> JSON:
    """A device request: `exactly` one (`exactly(...)`), or the first available of named alternatives."""
    if first_available is not None:
        return {"name": name, "firstAvailable": [{"name": f"{name}-{i}", **a} for i, a in enumerate(first_available)]}
    return {"name": name, "exactly": one or {}}




def device_taint_rule(name: str, device_taint: JSON, selector: JSON | None = None) -> JSON:
    """A DeviceTaintRule (cluster-scoped; resource.k8s.io/v1 from v1.37) putting `device_taint` on the devices
    `selector` names (`driver`, `pool`, `device`: each optional, all must match). No selector writes no
    `deviceSelector`: that matches no device from v1.37.1 (#141998; `{}` matches every device)."""
    spec: JSON = {"taint": device_taint, **({"deviceSelector": selector} if selector is not None else {})}
    return {"apiVersion": DEVICE_TAINT_RULES.api_version, "kind": DEVICE_TAINT_RULES.kind,
            "metadata": {"name": name}, "spec": spec}


def gpu(name: str, index: int, memory: str = "80Gi", taints: list[JSON] | None = None) -> JSON:
    """One device of a ResourceSlice, as a GPU driver publishes it: attributes, capacity and any taints."""
    found: JSON = {"name": name, "attributes": {"index": {"int": index}, "productName": {"string": "Fake GPU"}},
                   "capacity": {"memory": {"value": memory}}}
    if taints:
        found["taints"] = taints
    return found


def taint(key: str, value: str = "", effect: str = "NoExecute") -> JSON:
    """A device taint (KEP-5055, GA in v1.37): NoSchedule keeps new claims off the device, NoExecute also
    evicts the pods using it."""
    return {"key": key, **({"value": value} if value else {}), "effect": effect}


def device_slice(driver: str, node: str, devices: list[JSON], generation: int = 1) -> JSON:
    """The one ResourceSlice of pool `node` (a node-local driver's pool is named after its node) with `devices`."""
    return {"apiVersion": RESOURCE_SLICES.api_version, "kind": RESOURCE_SLICES.kind,
            "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": devices}}


def node_gpus(driver: str, node: str, count: int = 8, tainted: dict[str, JSON] | None = None) -> JSON:
    """A node's slice of `count` GPUs named gpu-0..; `tainted` maps a device's name to its taint."""
    tainted = tainted or {}
    return device_slice(driver, node, [gpu(f"gpu-{i}", i, taints=[tainted[f"gpu-{i}"]] if f"gpu-{i}" in tainted
                                             else None) for i in range(count)])


def allocated_devices(claim: JSON) -> list[str]:
    """`driver/pool/device` of each device a ResourceClaim was allocated (status.allocation.devices.results)."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])
    return [f"{r['driver']}/{r['pool']}/{r['device']}" for r in results]


def fabric_slice(driver: str, count: int = 1) -> JSON:
    """The one ResourceSlice of a network-attached driver: `count` devices (dev-0..) reachable from every node
    (allNodes), so a claim of them binds no pod to a node and one claim can serve pods on different nodes."""
    return {"apiVersion": RESOURCE_SLICES.api_version, "kind": RESOURCE_SLICES.kind,
            "metadata": {"name": f"fabric-{driver}"},
            "spec": {"driver": driver, "allNodes": True,
                     "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{i}"} for i in range(count)]}}


def resource_claim(name: str, *requests: JSON, namespace: str) -> JSON:
    """A ResourceClaim with these requests (`request(...)`): one claim, which pods share by `resourceClaimName`."""
    return {"apiVersion": RESOURCE_CLAIMS.api_version, "kind": RESOURCE_CLAIMS.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}}}
