"""Saving a failed attempt's logs (policies/evidence) before its pods are deleted: the one slow write.

The logs are read through `pods/log` at once, all within SAVE_SECONDS: a node that does not answer, a pod
already gone or a container that never ran is recorded as `(not readable: ...)`, never waited for longer,
so a restart is delayed by at most that. Saving is best effort: a refused ConfigMap is logged and the restart
goes on. Each log is asked for its last lines (the kubelet's limitBytes counts from the start of what it
sends, so the tail is cut here, by desired/evidence).
"""

from __future__ import annotations

import asyncio

import aiohttp
import structlog

from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.caches import Caches
from mpiop.desired import evidence
from mpiop.kube.client import CONFIGMAPS, PODS, ApiError, KubeClient
from mpiop.plan import Evidence, LogSource

log = structlog.get_logger(__name__)
SAVE_SECONDS = 10.0
TAIL_LINES = 5000
READ_BYTES = 1024 * 1024  # asked of the kubelet; the last LOG_BYTES of it are kept


class AttemptEvidence:
    def __init__(self, client: KubeClient, caches: Caches, seconds: float = SAVE_SECONDS) -> None:
        self.client = client
        self.caches = caches
        self.seconds = seconds

    async def save(self, job: MPIJob, wanted: Evidence) -> None:
        """Read the logs, create the ConfigMap (an existing one is kept: a retried pass), delete older ones."""
        logs = await self._read_all(job.metadata.namespace, wanted.logs)
        body = evidence.config_map(job, wanted.attempt, wanted.summary, logs)
        try:
            created = await self.client.create(CONFIGMAPS, job.metadata.namespace, body)
            self.caches.config_maps.observe_write(created)
            log.info("saved the failed attempt's logs", config_map=wanted.name, logs=len(logs))
        except ApiError as error:
            if not error.already_exists:
                log.warning("the failed attempt's logs could not be saved", config_map=wanted.name,
                            code=error.status, error=error.message[:200])
        for name in wanted.drop:
            try:
                await self.client.delete(CONFIGMAPS, job.metadata.namespace, name)
            except ApiError as error:
                if not error.not_found:
                    raise
            self.caches.config_maps.observe_delete(f"{job.metadata.namespace}/{name}")

    async def _read_all(self, namespace: str, sources: list[LogSource]) -> list[tuple[str, str]]:
        tasks = [asyncio.create_task(self._read(namespace, source)) for source in sources]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        late_text = f"(not readable: no answer within {self.seconds:g} s)"
        return [(evidence.log_key(s.pod, s.container), t.result() if t.done() and not t.cancelled() else late_text)
                for s, t in zip(sources, tasks, strict=True)]

    async def _read(self, namespace: str, source: LogSource) -> str:
        if source.unreadable or source.container is None:
            return f"(not readable: {source.unreadable or 'no container'})"
        query = {"container": source.container, "tailLines": TAIL_LINES, "limitBytes": READ_BYTES,
                 "previous": source.previous or None}
        try:
            raw = await self.client.request_raw("GET", PODS.path(namespace, source.pod, "log"), query=query,
                                                timeout=self.seconds)
        except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as error:
            return f"(not readable: {str(error)[:300] or type(error).__name__})"
        return raw.decode("utf-8", errors="replace")
