"""core/v1 Events on an MPIJob, for `kubectl describe`, sent off the reconcile path.

`record()` only queues: a reconcile never waits for an Event, and in a burst Events do not hold up pod
creations. A background task sends them, a few at a time, correlated as client-go's EventCorrelator does:

- an Event identical to one already waiting (same job, type, reason, message) is merged into it (count+1);
- an Event identical to one sent in the last 10 minutes bumps that Event's count with one PATCH instead of
  creating another object;
- from the 10th Event of one job with the same reason but different messages in 10 minutes on, they are
  combined into one "(combined from similar events): <latest message>" Event.

Best effort, never silent: an Event that cannot be sent (after retries for transient errors) or that is
dropped because too many are waiting is logged and counted in `mpiop_events_total{result}`; a lost Event
never fails a reconcile. Reasons the operator was told not to send (--no-lifecycle-events) are logged and
counted as `unsent`, and nothing else. Every Event recorded is also a log line carrying the job's key (kubeflow's
recorder logs each one too), so the operator's log alone tells a job's story.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import socket
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from mpiop import metrics
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import API_VERSION, KIND, MPIJob, format_time
from mpiop.kube.client import EVENTS, ApiError, Resource
from mpiop.plan import Event
from mpiop.printable import printable

log = structlog.get_logger(__name__)
COMPONENT = "mpi-job-controller"
WINDOW_SECONDS = 600.0  # client-go: defaultAggregateIntervalInSeconds, and how long a sent Event is bumped
SIMILAR_THRESHOLD = 10  # client-go: defaultAggregateMaxEvents
COMBINED_PREFIX = "(combined from similar events): "
CACHE_SIZE = 4096  # client-go: maxLruCacheEntries
RETRIES = (0.5, 2.0, 5.0)  # seconds before each new try of a transient failure

Key = tuple[str, str, str, str, str]
"""(namespace, involved object uid, type, reason, message)."""


@dataclass
class _Pending:
    involved: dict[str, str]
    event: Event
    first: str
    last: str
    count: int = 1


@dataclass
class _Sent:
    name: str
    count: int
    first: str
    at: float


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    since: float = 0.0


def _involved(job: MPIJob) -> dict[str, str]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": job.metadata.name,
            "namespace": job.metadata.namespace, "uid": job.metadata.uid or ""}


def event_body(namespace: str, involved: dict[str, str], event: Event, instance: str, first: str, last: str,
               count: int = 1) -> dict[str, object]:
    """A core/v1 Event as the recorder creates it (bench.apicost measures this very body)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": involved,
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
    }


class EventClient(Protocol):
    """What the recorder needs of the API client (KubeClient)."""

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON: ...

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: JSON) -> JSON: ...


class EventRecorder:
    def __init__(self, client: EventClient, instance: str | None = None, *, concurrency: int = 4,
                 max_pending: int = 10000, unsent_reasons: frozenset[str] = frozenset(),
                 retry_delays: Sequence[float] = RETRIES) -> None:
        """`unsent_reasons`: Events only logged, never sent (--no-lifecycle-events: every job's three)."""
        self.client = client
        self.unsent_reasons = unsent_reasons
        self.instance = instance or socket.gethostname()
        self.concurrency = concurrency
        self.max_pending = max_pending
        self.retry_delays = tuple(retry_delays)
        # Waiting Events by identity (a repeat merges into its entry); the queue says in which order to send them.
        self._pending: OrderedDict[Key, _Pending] = OrderedDict()
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._in_flight: dict[int, _Pending] = {}  # by id(): one key may be sent twice at once
        self._sent: OrderedDict[Key, _Sent] = OrderedDict()
        self._similar: OrderedDict[tuple[str, str, str, str], _Similar] = OrderedDict()
        self._consumers: list[asyncio.Task[None]] = []

    def record(self, job: MPIJob, event: Event, now: dt.datetime) -> None:
        """Queue one Event (returns at once)."""
        self.record_on(_involved(job), event, now)

    def record_on(self, involved: dict[str, str], event: Event, now: dt.datetime) -> None:
        """Queue one Event on any object, given as its reference (apiVersion, kind, name, namespace, uid)."""
        if (message := printable(event.message, newlines=True)) is not event.message:  # a tenant's words in it
            event = Event(event.type, event.reason, message)
        (log.warning if event.type == "Warning" else log.info)(
            "event", job=f"{involved['namespace']}/{involved['name']}", kind=involved["kind"], type=event.type,
            reason=event.reason, message=event.message)
        if event.reason in self.unsent_reasons:
            metrics.EVENTS.labels("unsent").inc()
            return
        event, key = self._aggregate(involved, event)
        stamp = format_time(now)
        pending = self._pending.get(key)
        if pending is not None:
            pending.count += 1
            pending.last = stamp
            pending.event = event
            return
        if len(self._pending) >= self.max_pending:
            _, dropped = self._pending.popitem(last=False)  # its key, still queued, is skipped when it comes up
            metrics.EVENTS.labels("dropped").inc(dropped.count)
            log.warning("event dropped: too many waiting to be sent", job=dropped.involved["name"],
                        reason=dropped.event.reason, waiting=len(self._pending))
        self._pending[key] = _Pending(involved, event, stamp, stamp)
        self._queue.put_nowait(key)
        if not self._consumers:
            self._consumers = [asyncio.create_task(self._consume(), name=f"event-sender-{n}")
                               for n in range(self.concurrency)]

    def _aggregate(self, involved: dict[str, str], event: Event) -> tuple[Event, Key]:
        """client-go's EventAggregator: many messages of one reason on one job become one combined Event.

        Returns the Event to send and its identity: the message for a plain Event, the reason alone for a
        combined one (so the next combined Event updates it instead of making another).
        """
        key = (involved["namespace"], involved["uid"] or f"{involved['namespace']}/{involved['name']}", event.type,
               event.reason)
        now = time.monotonic()
        similar = self._similar.get(key)
        if similar is None or now - similar.since > WINDOW_SECONDS:
            similar = self._similar[key] = _Similar(since=now)
        self._similar.move_to_end(key)
        while len(self._similar) > CACHE_SIZE:
            self._similar.popitem(last=False)
        if len(similar.messages) < SIMILAR_THRESHOLD:
            similar.messages.add(event.message)
        if len(similar.messages) < SIMILAR_THRESHOLD:
            return event, (*key, event.message)
        return Event(event.type, event.reason, COMBINED_PREFIX + event.message), (*key, COMBINED_PREFIX)

    def unsent(self) -> int:
        """Events waiting or being sent now (0: each one recorded so far was sent or given up on)."""
        return len(self._pending) + len(self._in_flight)

    async def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event was sent (or given up on); False if `timeout` passed first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
            return True
        return False

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is waiting (up to `timeout`), then stop; what is left (waiting or being sent) is counted
        and logged as lost."""
        if not await self.flush(timeout):
            lost = sum(p.count for p in (*self._pending.values(), *self._in_flight.values()))
            if lost:
                metrics.EVENTS.labels("dropped").inc(lost)
                log.warning("events not sent before shutdown", count=lost)
        for task in self._consumers:
            task.cancel()
        await asyncio.gather(*self._consumers, return_exceptions=True)
        self._consumers = []
        self._pending.clear()
        self._in_flight.clear()
        self._queue = asyncio.Queue()

    # -- the senders -------------------------------------------------------------------------------
    async def _consume(self) -> None:
        while True:
            key = await self._queue.get()
            pending = self._pending.pop(key, None)  # None: dropped while it waited
            try:
                if pending is not None:
                    self._in_flight[id(pending)] = pending
                    await self._send(key, pending)
            finally:
                if pending is not None:
                    self._in_flight.pop(id(pending), None)
                self._queue.task_done()

    async def _send(self, key: Key, pending: _Pending) -> None:
        for delay in (*self.retry_delays, None):
            try:
                await self._send_once(key, pending)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # an Event must never take the sender down
                transient = isinstance(error, OSError | TimeoutError) or (
                    isinstance(error, ApiError) and (error.status >= 500 or error.status == 429))
                if delay is None or not transient:
                    metrics.EVENTS.labels("failed").inc(pending.count)
                    log.warning("event not recorded", job=f"{key[0]}/{pending.involved['name']}",
                                reason=pending.event.reason, error=str(error))
                    return
                await asyncio.sleep(delay)

    async def _send_once(self, key: Key, pending: _Pending) -> None:
        namespace = key[0]
        sent = self._sent.get(key)
        if sent is not None and time.monotonic() - sent.at <= WINDOW_SECONDS:
            count = sent.count + pending.count
            try:
                await self.client.patch(EVENTS, namespace, sent.name, {
                    "count": count, "lastTimestamp": pending.last, "message": pending.event.message})
            except ApiError as error:
                if not error.not_found:
                    raise
            else:
                self._remember(key, _Sent(sent.name, count, sent.first, time.monotonic()))
                metrics.EVENTS.labels("updated").inc(pending.count)
                return
        created = await self.client.create(EVENTS, namespace, self._body(namespace, pending))
        self._remember(key, _Sent(created["metadata"]["name"], pending.count, pending.first, time.monotonic()))
        metrics.EVENTS.labels("created").inc(pending.count)

    def _remember(self, key: Key, sent: _Sent) -> None:
        self._sent[key] = sent
        self._sent.move_to_end(key)
        while len(self._sent) > CACHE_SIZE:
            self._sent.popitem(last=False)

    def _body(self, namespace: str, pending: _Pending) -> dict[str, object]:
        return event_body(namespace, pending.involved, pending.event, self.instance, pending.first, pending.last,
                          pending.count)
