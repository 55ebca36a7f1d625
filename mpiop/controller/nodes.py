"""Whether the nodes a failing attempt ran on are NotReady or deleted (policies/node_exclusion names them).

One GET per node, all at once, each bounded by CHECK_SECONDS, only on the pass that fails an attempt: mpiop keeps
no informer of every node, which at 10,000 nodes would hold them all for a rare failure (the one it keeps holds
only GPU nodes, without their conditions, for laying out total-GPU jobs). Best effort: a node that cannot
be read counts as fine. Under a namespaced Role (the chart's watchNamespace) nodes cannot be granted; the first
refusal is logged and no node is read from then on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import structlog

from mpiop.kube.client import NODES, ApiError, KubeClient

log = structlog.get_logger(__name__)
CHECK_SECONDS = 5.0


def fault(node: dict[str, Any]) -> str | None:
    """`NotReady (Ready=Unknown, NodeStatusUnknown)` when the node's Ready condition is not True; else None."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") == "True":
        return None
    reason = f", {ready['reason']}" if ready.get("reason") else ""
    return f"NotReady (Ready={ready.get('status')}{reason})"


class NodeChecks:
    def __init__(self, client: KubeClient, seconds: float = CHECK_SECONDS) -> None:
        self.client = client
        self.seconds = seconds
        self._forbidden = False

    async def faults(self, nodes: list[str]) -> dict[str, str]:
        """node -> `deleted` or `NotReady (...)`, for those of `nodes` that are."""
        if self._forbidden or not nodes:
            return {}
        found = await asyncio.gather(*(self._fault(n) for n in nodes))
        return {n: f for n, f in zip(nodes, found, strict=True) if f is not None}

    async def _fault(self, name: str) -> str | None:
        try:
            async with asyncio.timeout(self.seconds):
                node = await self.client.get(NODES, None, name)
        except ApiError as error:
            if error.not_found:
                return "deleted"
            if error.forbidden and not self._forbidden:
                self._forbidden = True
                log.warning("RBAC does not grant get on nodes: NotReady or deleted nodes are not excluded "
                            "(deploy/'s ClusterRole grants it)", error=error.message[:200])
            return None
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            log.info("node not read", node=name, error=str(error)[:200] or type(error).__name__)
            return None
        return fault(node)
