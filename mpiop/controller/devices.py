"""Which DRA device a NoExecute device taint evicted a pod for (policies/node_exclusion names the pod).

The device taint manager's DisruptionTarget message names no device, so on the pass that fails an attempt for
it: one list of the namespace's ResourceClaims (the pod's are those it owns, still allocated while it
terminates) and one of its node's ResourceSlices (field selector spec.nodeName), each bounded by CHECK_SECONDS;
the matching is node_exclusion.tainted_devices (pure). Best effort: what cannot be read says nothing, and the node
is excluded all the same; after the first refusal (a role without `list` on them) nothing is read again.
"""

from __future__ import annotations

import asyncio

import aiohttp
import structlog

from mpiop.api.raw import JSON
from mpiop.kube.client import RESOURCE_CLAIMS, RESOURCE_SLICES, ApiError, KubeClient
from mpiop.plan import DeviceFault
from mpiop.policies.node_exclusion import DeviceCheck, tainted_devices

log = structlog.get_logger(__name__)
CHECK_SECONDS = 5.0


class DeviceChecks:
    def __init__(self, client: KubeClient, seconds: float = CHECK_SECONDS) -> None:
        self.client = client
        self.seconds = seconds
        self._forbidden = False

    async def fault(self, namespace: str, check: DeviceCheck) -> DeviceFault | None:
        """The pod's tainted devices (or its node's, its claims gone); None if unknown."""
        if self._forbidden:
            return None
        try:
            async with asyncio.timeout(self.seconds):
                claims, slices = await asyncio.gather(
                    self.client.list(RESOURCE_CLAIMS, namespace),
                    self.client.list(RESOURCE_SLICES, None, fieldSelector=f"spec.nodeName={check.node}"))
        except ApiError as error:
            if error.forbidden:
                self._forbidden = True
                log.warning("RBAC does not grant list on resourceclaims and resourceslices: a device taint's "
                            "eviction excludes the node without naming the device", error=error.message[:200])
            else:
                log.info("devices not read", pod=check.pod, error=error.message[:200])
            return None
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            log.info("devices not read", pod=check.pod, error=str(error)[:200] or type(error).__name__)
            return None
        owned = [c for c in claims.get("items") or [] if _owned_by(c, check.uid)]
        return tainted_devices(owned, list(slices.get("items") or []))


def _owned_by(claim: JSON, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (claim.get("metadata") or {}).get("ownerReferences") or [])
