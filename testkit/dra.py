"""Dynamic Resource Allocation objects (resource.k8s.io/v1) for tests: DeviceClasses and ResourceClaimTemplates,
as plain JSON, in the v1 schema (a request is `exactly` one device class's devices, or `firstAvailable` of
alternatives)."""

from __future__ import annotations

from typing import Any

from mpiop.api.raw import JSON
from mpiop.kube.client import DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_SLICES

__all__ = ["DEVICE_CLASSES", "RESOURCE_SLICES", "claim_template", "device_class", "exactly", "request",
           "resource_slice"]


def device_class(name: str) -> JSON:
    """A DeviceClass selecting the devices of the driver of the same name (NVIDIA's `gpu.nvidia.com` is so)."""
    return {"apiVersion": DEVICE_CLASSES.api_version, "kind": DEVICE_CLASSES.kind, "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}}


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
