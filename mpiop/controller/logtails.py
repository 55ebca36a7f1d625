"""The last lines of a failed container's log, read through `pods/log` for the failure report.

Only for the one container `status.failure_report.log_request` names, only while the job is unfinished
and its current attempt has a failed pod, and once per (pod uid, container): a failed attempt costs one
GET, however many reconciles see it. Best effort: a node that cannot be reached (or a pod without one)
gives no tail, never a failed reconcile.
"""

from __future__ import annotations

from collections import OrderedDict

import aiohttp
import structlog

from mpiop.api.v2beta1 import MPIJob
from mpiop.kube.client import PODS, ApiError, KubeClient
from mpiop.plan import Observed
from mpiop.status import failure_report

log = structlog.get_logger(__name__)
# Bytes asked of the kubelet: the report keeps 20 lines / 2 KiB of them; this only bounds a pathological line.
LIMIT_BYTES = 64 * 1024
TIMEOUT_SECONDS = 10.0


class LogTails:
    def __init__(self, client: KubeClient, max_entries: int = 256) -> None:
        self.client = client
        self.max_entries = max_entries
        self._read: OrderedDict[tuple[str, str, bool], str] = OrderedDict()

    async def fill(self, job: MPIJob, observed: Observed) -> None:
        """Put the tail the failure report wants (if any) into `observed.log_tails`."""
        if job.status.finished:
            return
        request = failure_report.log_request(job, observed, job.status.restart_count or 0)
        pod = observed.pod(request.pod) if request is not None else None
        if request is None or pod is None:
            return
        key = (str(pod["metadata"].get("uid")), request.container, request.previous)
        if key not in self._read:
            self._read[key] = await self._get(job.metadata.namespace, request)
            while len(self._read) > self.max_entries:
                self._read.popitem(last=False)
        observed.log_tails[request.pod] = self._read[key]

    async def _get(self, namespace: str, request: failure_report.LogRequest) -> str:
        query = {"container": request.container, "tailLines": failure_report.TAIL_LINES, "limitBytes": LIMIT_BYTES,
                 "previous": request.previous or None}
        try:
            raw = await self.client.request_raw("GET", PODS.path(namespace, request.pod, "log"), query=query,
                                                timeout=TIMEOUT_SECONDS)
        except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as error:
            log.info("no log tail for the failure report", pod=request.pod, container=request.container,
                     error=str(error)[:200])
            return ""
        return failure_report.bound_tail(raw)
