"""Leader election on a coordination.k8s.io/v1 Lease: client-go's algorithm on the raw-JSON client.

Not kubernetes_asyncio.leaderelection (read at 36.1): it stamps naive *local* time and labels it UTC
(`fromtimestamp()`, then `isoformat() + "Z"`), so renewTime is off by the node's UTC offset; `str(datetime)`
drops the microseconds when they are zero and its own parser then returns None for that time (the bug
kubernetes-client/python#2690 fixed there; kubernetes_asyncio#387 fixed another parse error in the same
lock); it measures the renew deadline on the wall clock, lets one slow request run past the deadline, and
never releases the lease on shutdown. The rules here are client-go's (tools/leaderelection):

* a candidate takes the lease when it has no holder, or when the record has not changed for
  leaseDurationSeconds on the candidate's *own monotonic clock* (other machines' clocks are never trusted);
* every write is an update carrying the resourceVersion that was read (optimistic concurrency), so two
  candidates can never both win;
* the leader renews every retry period; it counts as leader only while its last successful renewal is
  younger than the renew deadline, checked at the moment of asking (`is_leader`), so a stalled loop can
  never write on a stale lease: renew deadline < lease duration means it stops before anyone else starts;
* `release()` (on SIGTERM) empties holderIdentity with leaseDurationSeconds 1, like ReleaseOnCancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import structlog

from mpiop.api.raw import JSON
from mpiop.kube.client import ApiError, KubeClient, Resource

log = structlog.get_logger(__name__)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
JITTER = 1.2  # client-go's JitterFactor: retries are spread over [retry, retry * 1.2]
NETWORK_ERRORS = (ApiError, aiohttp.ClientError, OSError, TimeoutError)


class LeadershipLostError(RuntimeError):
    """The lease could not be renewed within the renew deadline."""


class NotLeaderError(RuntimeError):
    """A write was attempted while this process does not hold the lease."""


def format_micro_time(value: dt.datetime) -> str:
    """metav1.MicroTime's wire format: RFC 3339 in UTC with exactly six fractional digits."""
    if value.tzinfo is None:
        raise ValueError("naive datetime: MicroTime needs an aware one")
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str) -> dt.datetime:
    """Any RFC 3339 time the apiserver returns (fraction optional, Z or offset), as aware UTC."""
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time without zone: {value!r}")
    return parsed.astimezone(dt.UTC)


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def validate(self) -> None:
        """client-go's constraints: without them a leader could outlive its lease."""
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            raise ValueError("leader election durations must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("the lease duration must be greater than the renew deadline")
        if self.renew_deadline <= JITTER * self.retry_period:
            raise ValueError(f"the renew deadline must be greater than {JITTER} x the retry period")
        if not self.identity:
            raise ValueError("leader election needs an identity")


class LeaderElector:
    """One candidate. `run()` campaigns, then renews; `leading` is set while it leads."""

    def __init__(self, client: KubeClient, config: ElectionConfig, *,
                 on_change: Callable[[bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        config.validate()
        self.client = client
        self.config = config
        self.on_change = on_change
        self.clock = clock
        self.wall = wall
        self.leading = asyncio.Event()
        self._lease: JSON | None = None  # the Lease as last read or written (its resourceVersion matters)
        self._observed_spec: JSON | None = None
        self._observed_at = 0.0  # monotonic time the observed spec last changed
        self._renewed_at: float | None = None  # monotonic start of our last successful acquire/renew
        self._contact_at: float | None = None  # monotonic time of the last successful read or write

    # -- state -------------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """True only while the last successful renewal is younger than the renew deadline."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.config.renew_deadline

    def guard_write(self, method: str, path: str) -> None:
        """The operator client's write_guard: checked as each write leaves (after the client-side rate limiter),
        so a write queued while the lease was ours cannot leave once the renew deadline has passed."""
        if not self.is_leader():
            raise NotLeaderError(f"{method} {path}: not the leader, write refused")

    def healthy(self) -> bool:
        """Leading, or standing by with a recent successful look at the lease (for /readyz)."""
        if self.is_leader():
            return True
        return self._contact_at is not None and self.clock() - self._contact_at < self.config.lease_duration

    @property
    def holder(self) -> str:
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def _set_leading(self, leading: bool) -> None:
        if not leading:
            self._renewed_at = None  # from now on is_leader() is False, whatever the event says
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
        else:
            self.leading.clear()
        log.info("leader election: " + ("started leading" if leading else "stopped leading"),
                 identity=self.config.identity, lease=f"{self.config.namespace}/{self.config.name}")
        if self.on_change is not None:
            self.on_change(leading)

    # -- one attempt -------------------------------------------------------------------------------
    def _path(self, named: bool = True) -> str:
        return LEASES.path(self.config.namespace, self.config.name if named else None)

    async def try_acquire_or_renew(self) -> bool:
        """Read the lease and write ourselves in if it is free, expired, or already ours."""
        started = self.clock()
        now = format_micro_time(self.wall())
        spec: JSON = {"holderIdentity": self.config.identity,
                      "leaseDurationSeconds": math.ceil(self.config.lease_duration),
                      "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
        try:
            lease = await self.client.request("GET", self._path())
        except ApiError as error:
            if not error.not_found:
                raise
            body = {"apiVersion": LEASES.api_version, "kind": LEASES.kind,
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace}, "spec": spec}
            created = await self.client.request("POST", self._path(named=False), body=body,
                                                query={"fieldManager": self.client.field_manager})
            self._observe(created, started, renewed=True)
            return True
        self._contact_at = self.clock()
        old: JSON = lease.get("spec") or {}
        if old != self._observed_spec:
            self._observed_spec, self._observed_at = old, self.clock()
        self._lease = lease
        holder = old.get("holderIdentity") or ""
        ours = holder == self.config.identity
        duration = float(old.get("leaseDurationSeconds") or self.config.lease_duration)
        if holder and not ours and self._observed_at + duration > self.clock():
            return False  # held by another, and we have not yet seen it stand still for a lease duration
        if ours and old.get("acquireTime"):
            spec["acquireTime"] = old["acquireTime"]
            spec["leaseTransitions"] = old.get("leaseTransitions") or 0
        else:
            spec["leaseTransitions"] = (old.get("leaseTransitions") or 0) + 1
        body = {**lease, "spec": spec}
        updated = await self.client.request("PUT", self._path(), body=body,
                                            query={"fieldManager": self.client.field_manager})
        self._observe(updated, started, renewed=True)
        return True

    def _observe(self, lease: JSON, started: float, *, renewed: bool) -> None:
        self._lease = lease
        self._observed_spec = lease.get("spec") or {}
        self._observed_at = self._contact_at = self.clock()
        if renewed:
            self._renewed_at = started

    async def _attempt(self, timeout: float) -> bool:
        """One try, bounded in time; errors (including 409 Conflict: someone else wrote first) are a no."""
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                return await self.try_acquire_or_renew()
        except NETWORK_ERRORS as error:
            conflict = isinstance(error, ApiError) and error.conflict
            (log.debug if conflict else log.warning)(
                "leader election: attempt failed", identity=self.config.identity,
                error=str(error) or type(error).__name__)
            return False

    # -- the loops ---------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Campaign until leading, then renew until `stop` (then release) or a missed deadline (raise)."""
        cfg = self.config
        log.info("leader election: campaigning", identity=cfg.identity, lease=f"{cfg.namespace}/{cfg.name}")
        try:
            while not await self._attempt(cfg.renew_deadline):
                if await _sleep_or_stop(cfg.retry_period * random.uniform(1.0, JITTER), stop):
                    return
            if stop.is_set():
                return
            self._set_leading(True)
            while not await _sleep_or_stop(cfg.retry_period, stop):
                if not await self._renew(stop):
                    if stop.is_set():
                        return
                    self._set_leading(False)
                    raise LeadershipLostError(f"{cfg.identity} could not renew lease {cfg.namespace}/{cfg.name} "
                                              f"within {cfg.renew_deadline:g}s")
        finally:
            if stop.is_set():
                await self.release()

    async def _renew(self, stop: asyncio.Event) -> bool:
        """Retry until the renewal succeeds or the renew deadline (from the last success) passes."""
        while True:
            assert self._renewed_at is not None
            remaining = self._renewed_at + self.config.renew_deadline - self.clock()
            if remaining <= 0:
                return False
            if await self._attempt(remaining):
                return True
            remaining = self._renewed_at + self.config.renew_deadline - self.clock()
            if remaining <= 0 or await _sleep_or_stop(min(self.config.retry_period, remaining), stop):
                return False

    async def release(self) -> None:
        """Give the lease up at once (empty holder, 1 s duration), if we still hold it."""
        was_leader, lease = self.is_leader(), self._lease
        self._set_leading(False)
        if not was_leader or lease is None:
            return
        now = format_micro_time(self.wall())
        spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
                "leaseTransitions": (lease.get("spec") or {}).get("leaseTransitions") or 0}
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                await self.client.request("PUT", self._path(), body={**lease, "spec": spec},
                                          query={"fieldManager": self.client.field_manager})
            log.info("leader election: released the lease", identity=self.config.identity)
        except NETWORK_ERRORS as error:  # a conflict means someone else holds it now: nothing to release
            log.warning("leader election: could not release the lease", error=str(error) or type(error).__name__)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> bool:
    """Sleep; True (early) when `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
