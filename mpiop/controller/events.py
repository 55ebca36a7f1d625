"""core/v1 Events on an MPIJob, for `kubectl describe`. Best effort: a lost Event never fails a reconcile."""

from __future__ import annotations

import datetime as dt
import socket

import structlog

from mpiop.api.v2beta1 import API_VERSION, KIND, MPIJob, format_time
from mpiop.kube.client import EVENTS, ApiError, KubeClient
from mpiop.plan import Event

log = structlog.get_logger(__name__)
COMPONENT = "mpi-job-controller"


class EventRecorder:
    def __init__(self, client: KubeClient, instance: str | None = None) -> None:
        self.client = client
        self.instance = instance or socket.gethostname()

    async def record(self, job: MPIJob, event: Event, now: dt.datetime) -> None:
        stamp = format_time(now)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{job.metadata.name}.", "namespace": job.metadata.namespace},
            "involvedObject": {
                "apiVersion": API_VERSION, "kind": KIND, "name": job.metadata.name,
                "namespace": job.metadata.namespace, "uid": job.metadata.uid,
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.client.create(EVENTS, job.metadata.namespace, body)
        except (ApiError, OSError) as error:
            log.warning("event not recorded", job=job.key, reason=event.reason, error=str(error))
