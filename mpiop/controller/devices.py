"""Which DRA device a NoExecute device taint evicted a pod for (policies/node_exclusion names the pod).

The device taint manager's DisruptionTarget message names no device, so on the pass that fails an attempt for
it: one list of the namespace's ResourceClaims (the pod's are those it owns, still allocated while it
terminates), one of its node's ResourceSlices (field selector spec.nodeName) and one of the DeviceTaintRules (an
admin's taints, resource.k8s.io/v1 from 1.37), each bounded by CHECK_SECONDS; the matching is
node_exclusion.tainted_devices (pure). Best effort: what cannot be read says nothing, and the node is excluded all
the same; after the first refusal (a role without `list` on them) nothing is read again, and the rules are not read
again once refused or not served at v1 (a 1.35 or 1.36 apiserver).
"""

from __future__ import annotations

import asyncio

import aiohttp
import structlog

from mpiop.api.raw import JSON
from mpiop.kube.client import DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_SLICES, ApiError, KubeClient
from mpiop.plan import DeviceFault
from mpiop.policies.node_exclusion import DeviceCheck, tainted_devices

log = structlog.get_logger(__name__)
CHECK_SECONDS = 5.0


class DeviceChecks:
    def __init__(self, client: KubeClient, seconds: float = CHECK_SECONDS) -> None:
        self.client = client
        self.seconds = seconds
        self._forbidden = False
        self._rules_unreadable = False

    async def fault(self, namespace: str, check: DeviceCheck) -> DeviceFault | None:
        """The pod's tainted devices (or its node's, its claims gone); None if unknown."""
        if self._forbidden:
            return None
        try:
            async with asyncio.timeout(self.seconds):
                claims, slices, rules = await asyncio.gather(
                    self.client.list(RESOURCE_CLAIMS, namespace),
                    self.client.list(RESOURCE_SLICES, None, fieldSelector=f"spec.nodeName={check.node}"),
                    self._rules())
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
        return tainted_devices(owned, list(slices.get("items") or []), rules)

    async def _rules(self) -> list[JSON]:
        """Every DeviceTaintRule; none, and never asked again, when the role may not list them or they are not
        served at v1."""
        if self._rules_unreadable:
            return []
        try:
            found = await self.client.list(DEVICE_TAINT_RULES, None)
        except ApiError as error:
            if error.forbidden or error.not_found:
                self._rules_unreadable = True
                log.warning("DeviceTaintRules not read: a rule's eviction excludes the node without naming the device",
                            error=error.message[:200])
                return []
            raise
        return list(found.get("items") or [])


def _owned_by(claim: JSON, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (claim.get("metadata") or {}).get("ownerReferences") or [])
