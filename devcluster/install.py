"""Install (or update) the MPIJob CRD, or another CRD (gang schedulers' PodGroups), and wait until it is served.

Used by `make run` and the tests. The CRD is sent through the API rather than `kubectl apply`: its schema is
far larger than the 256 KiB last-applied-configuration annotation that client-side apply would write.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mpiop.api.crd import crd
from mpiop.kube.client import CRDS, MPIJOBS, ApiError, KubeClient, Resource

_POLL_SECONDS = 0.1


def _established(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def _create_or_update(kube: KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    name = body["metadata"]["name"]
    for _ in range(10):
        try:
            return await kube.create(CRDS, None, body)
        except ApiError as error:
            if not error.already_exists:
                raise
        current = await kube.get(CRDS, None, name)
        updated = {**body, "metadata": {**body["metadata"],
                                        "resourceVersion": current["metadata"]["resourceVersion"]}}
        try:
            return await kube.replace(CRDS, None, name, updated)
        except ApiError as error:
            # Deleted or changed by someone else in between: try again from the top.
            if not (error.conflict or error.not_found):
                raise
    raise RuntimeError(f"could not create or update CustomResourceDefinition {name}: too many conflicts")


async def install_crd(kube: KubeClient, timeout: float = 60) -> None:
    """Create or update mpijobs.kubeflow.org, then wait until it is Established and mpijobs can be listed."""
    await install_custom_resource(kube, crd(), MPIJOBS, timeout)


async def install_custom_resource(kube: KubeClient, body: dict[str, Any], served: Resource,
                                  timeout: float = 60) -> None:
    """Create or update the CRD `body`, then wait until it is Established and `served` can be listed."""
    deadline = time.monotonic() + timeout
    name = body["metadata"]["name"]
    await _create_or_update(kube, body)
    last = "not Established"
    while time.monotonic() < deadline:
        current = await kube.get(CRDS, None, name)
        if _established(current):
            try:
                await kube.list(served, None, limit=1)
                return
            except ApiError as error:
                if not error.not_found:
                    raise
                last = f"Established, but the {served.plural} resource is not served yet"
        else:
            conditions = (current.get("status") or {}).get("conditions") or []
            last = "; ".join(f"{c.get('type')}={c.get('status')}: {c.get('message', '')}" for c in conditions) or last
        await asyncio.sleep(_POLL_SECONDS)
    raise TimeoutError(f"CustomResourceDefinition {name} not ready after {timeout:g}s: {last}")
