"""An informer that keeps only the objects something asked for by key: a cache a tenant cannot fill by creating.

Some kinds have no selector that tells mpiop's from anyone's: a ResourceClaimTemplate a job's claims are made from is
usually its user's, with any name, labels or owner. Kept all (as before), 100,000 small templates in any watched
namespace grew the leader with them (issue 60). This informer lists and watches the kind as any other, but keeps
(trims and caches) an object only while its key is *wanted*: `want(key)` and `unwant(key)`, fed by its user (for
claim templates, controller/caches.py: the names the cached MPIJobs' pod templates claim from, and a laid-out job's
own `<job>-gpus`). What the cache holds is then bounded by what is wanted, whatever else exists; an object that is
not wanted costs one decode as its list item or watch event goes by, nothing kept.

An object that exists before it is wanted (a template made before the job that names it) was dropped when it went
by, so it is fetched then, once, by name (a GET: one read, whatever else the namespace holds):

    wanted before the first list starts    -> that list keeps it (the informer may wait for its feeder's cache:
                                              `after`, so the wanted keys are known when it lists)
    wanted while a list is running         -> fetched once that list is done (its item may have gone by already)
    wanted otherwise (watching, retrying)  -> fetched now

A fetch's answer goes into the cache as a watch event would (handlers fire: whoever waits for the object is told),
unless the key is no longer wanted, a list completed since the fetch was sent (that list, started with the key
wanted, saw it, or the watch from it will), or the watch has deleted it since (its tombstone). Not found: nothing,
the watch brings it when it is made, kept since it is wanted. A failed fetch is retried with the informer's backoff
while the key stays wanted; a refusal (403: a role without `get`) or an answer that cannot be decoded is logged and
left to the watch. `fetched(keys)`
waits for the fetches in flight of some keys, so a reader never takes an object still being fetched for one that
does not exist. Unwanted, an object leaves the cache at once, without telling the handlers (nothing wants it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp
import structlog

from mpiop.api.raw import JSON
from mpiop.kube import resourceversion
from mpiop.kube.backoff import Backoff
from mpiop.kube.client import ApiError
from mpiop.kube.codec import UNDECODABLE
from mpiop.kube.informer import Informer, object_key

log = structlog.get_logger(__name__)

FETCHES_AT_ONCE = 8  # a thousand jobs created at once do not open a thousand GETs


@dataclass
class WantedInformer(Informer):
    # Set before the first list (e.g. the feeder's `synced`): that list then knows the keys to keep.
    after: asyncio.Event | None = None

    _wanted: set[str] = field(default_factory=set, init=False)
    _listing: bool = field(default=False, init=False)
    _wanted_while_listing: set[str] = field(default_factory=set, init=False)
    _fetches: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _fetch_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(FETCHES_AT_ONCE), init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.accept = self.is_wanted

    def is_wanted(self, obj: JSON) -> bool:
        return object_key(obj) in self._wanted

    def wanted_count(self) -> int:
        return len(self._wanted)

    def want(self, key: str) -> None:
        if key in self._wanted:
            return
        self._wanted.add(key)
        if self._listing:
            self._wanted_while_listing.add(key)
        elif self.synced.is_set():
            self._fetch(key)
        # else the first list, still to start, keeps it

    def unwant(self, key: str) -> None:
        self._wanted.discard(key)
        self._wanted_while_listing.discard(key)
        fetch = self._fetches.pop(key, None)
        if fetch is not None:
            fetch.cancel()
        self._delete(key, notify=False)

    async def fetched(self, keys: Iterable[str], timeout: float = 10.0) -> None:
        """Return once the fetches in flight of `keys` have answered (or after `timeout`): what is cached of them then
        is what exists."""
        pending = [task for key in keys if (task := self._fetches.get(key)) is not None]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def fetching(self) -> int:
        return len(self._fetches)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.after is not None:
            await self.after.wait()
        try:
            await super().run()
        finally:
            for task in list(self._fetches.values()):
                task.cancel()
            self._fetches.clear()

    async def relist(self) -> None:
        self._listing = True
        try:
            await super().relist()
        finally:
            self._listing = False
            late, self._wanted_while_listing = self._wanted_while_listing, set()
            for key in sorted(late & self._wanted):
                self._fetch(key)

    def _fetch(self, key: str) -> None:
        if key in self._fetches:
            return
        task = asyncio.get_running_loop().create_task(self._fetch_one(key, self.stats.lists),
                                                      name=f"fetch-{self.resource.plural}")
        self._fetches[key] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._fetches.get(key) is finished:
                del self._fetches[key]
            if not finished.cancelled() and (error := finished.exception()) is not None:
                log.error("fetch failed", resource=self.resource.plural, key=key, error=repr(error)[:300])

        task.add_done_callback(done)

    def _current(self, key: str, lists: int) -> bool:
        """A fetch sent after `lists` lists still matters: its key is wanted and no list has completed since."""
        return key in self._wanted and self.stats.lists == lists

    async def _fetch_one(self, key: str, lists: int) -> None:
        namespace, _, name = key.rpartition("/")
        backoff = Backoff()
        while self._current(key, lists):
            try:
                async with self._fetch_slots:
                    if not self._current(key, lists):
                        return
                    found = await self.client.get_or_none(self.resource, namespace or None, name)
            except ApiError as error:
                if error.status < 500 and error.status != 429:
                    log.warning("fetch refused: left to the watch", resource=self.resource.plural, key=key,
                                status=error.status, error=error.message[:200])
                    return
                await asyncio.sleep(backoff.next())
                continue
            except ValueError as error:  # undecodable (too deep): the watch reports its stub when it next changes
                log.warning("fetched object cannot be decoded: left to the watch", resource=self.resource.plural,
                            key=key, error=str(error)[:200])
                return
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                wait = backoff.next()
                log.info("fetch failed; retrying", resource=self.resource.plural, key=key,
                         error_type=type(error).__name__, retry_in=round(wait, 2))
                await asyncio.sleep(wait)
                continue
            if found is not None and self._current(key, lists):
                self._fetched(key, found)
            return

    def _fetched(self, key: str, obj: JSON) -> None:
        """A fetch's answer, as a watch event of it: cached (handlers told) unless the watch deleted it since."""
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        deleted_at = self._tombstones.get(key)
        if deleted_at is not None and (resourceversion.order(obj, deleted_at) or 0) <= 0:
            return
        if UNDECODABLE in obj:
            self._report(obj)
        else:
            self._set(obj, key=key)
