"""Saving a failed attempt's logs (policies/evidence) before its pods are deleted: the one slow write.

The logs come from the shared reads (logreads), most already started by the failure report's: each is bounded
from its start, and a node that does not answer, a pod already gone or a container that never ran is recorded
as `(not readable: ...)`, so a restart is delayed by at most one bound. Saving is best effort: a refused
ConfigMap is logged and the restart goes on. Older attempts' ConfigMaps are deleted after the pass, off the
restart's path.
"""

from __future__ import annotations

import aiohttp
import structlog

from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.caches import Caches
from mpiop.controller.logreads import LogReads, run_of
from mpiop.desired import evidence
from mpiop.kube.client import CONFIGMAPS, ApiError, KubeClient
from mpiop.plan import Evidence, Observed

log = structlog.get_logger(__name__)


class AttemptEvidence:
    def __init__(self, client: KubeClient, caches: Caches, reads: LogReads) -> None:
        self.client = client
        self.caches = caches
        self.reads = reads

    async def save(self, job: MPIJob, wanted: Evidence, observed: Observed) -> None:
        """Read the logs and create the ConfigMap (an existing one is kept: a retried pass)."""
        reads = await self.reads.read_all(job.metadata.namespace,
                                          [(s, run_of(observed, s.pod)) for s in wanted.logs])
        logs = [(evidence.log_key(s.pod, s.container), r.evidence()) for s, r in zip(wanted.logs, reads, strict=True)]
        body = evidence.config_map(job, wanted.attempt, wanted.summary, logs, wanted.progress)
        try:
            created = await self.client.create(CONFIGMAPS, job.metadata.namespace, body)
            self.caches.config_maps.observe_write(created)
            log.info("saved the failed attempt's logs", config_map=wanted.name, logs=len(logs))
        except ApiError as error:
            if not error.already_exists:
                log.warning("the failed attempt's logs could not be saved", config_map=wanted.name,
                            code=error.status, error=error.message[:200])

    async def drop(self, job: MPIJob, wanted: Evidence) -> None:
        """Delete the attempts' ConfigMaps past --kept-attempts (best effort: the next failure asks again)."""
        for name in wanted.drop:
            try:
                await self.client.delete(CONFIGMAPS, job.metadata.namespace, name)
            except ApiError as error:
                if not error.not_found:
                    log.warning("an old attempt's logs could not be deleted", config_map=name, code=error.status,
                                error=error.message[:200])
                    continue
            except (OSError, RuntimeError, aiohttp.ClientError) as error:  # after the pass: nobody to raise to
                log.warning("an old attempt's logs could not be deleted", config_map=name, error=str(error)[:200])
                continue
            self.caches.config_maps.observe_delete(f"{job.metadata.namespace}/{name}")
