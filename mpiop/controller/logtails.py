"""The last lines of a failed container's log for the failure report, from the shared read (logreads).

Only for the one container `status.failure_report.log_request` names, only while the job is unfinished and its
current attempt has a failed pod; each log is read once (logreads), however many reconciles see it. When the
container ended (not restarted in place), the attempt is about to fail: its other evidence logs are read
alongside, so saving them waits no second bound. Best effort: a node that cannot be reached (or a pod without
one) gives no tail, never a failed reconcile.
"""

from __future__ import annotations

import structlog

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.logreads import LogReads, run_of
from mpiop.plan import LogSource, Observed
from mpiop.policies import evidence
from mpiop.status import failure_report

log = structlog.get_logger(__name__)


class LogTails:
    def __init__(self, reads: LogReads) -> None:
        self.reads = reads

    async def fill(self, job: MPIJob, observed: Observed) -> None:
        """Put the tail the failure report wants (if any) into `observed.log_tails`."""
        if job.status.finished:
            return
        attempt = job.status.attempt
        request = failure_report.log_request(job, observed, attempt)
        pod = observed.pod(request.pod) if request is not None else None
        if request is None or pod is None:
            return
        namespace = job.metadata.namespace
        if not request.previous:
            for source in evidence.log_sources(job, observed, attempt):
                self.reads.start(namespace, source, run_of(observed, source.pod))
        wanted = LogSource(request.pod, request.container, request.previous)
        read = await self.reads.start(namespace, wanted, run_of(observed, request.pod))
        if read.unreadable:
            log.info("no log tail for the failure report", pod=request.pod, container=request.container,
                     error=read.unreadable[:200], node=podstate.node_name(pod))
            return
        observed.log_tails[request.pod] = failure_report.bound_tail(read.text)
