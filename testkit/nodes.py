"""Node objects with GPUs, for the total-GPU layout's tests: whole Node manifests (the policy reads them as the
node cache trims them; the integration tests create them as plain Nodes, which no kubelet runs)."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int, resource: str = GPU, *, labels: dict[str, str] | None = None,
             taints: list[JSON] | None = None, unschedulable: bool = False) -> JSON:
    """A Node offering `gpus` of `resource` (with cpu and memory, as a real node's allocatable has)."""
    spec: JSON = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", resource: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def gpu_nodes(prefix: str, count: int, gpus: int, resource: str = GPU, **options: Any) -> list[JSON]:
    return [gpu_node(f"{prefix}-{i}", gpus, resource, **options) for i in range(count)]


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> JSON:
    return {"key": key, **({"value": value} if value else {}), "effect": effect}
