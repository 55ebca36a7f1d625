"""List-then-watch into a local cache of trimmed raw dicts, with indexes and change callbacks.

The shape of client-go's reflector + indexer, compact: one coroutine per informer lists (paginated),
then watches from the list's resourceVersion with bookmarks. 410 Gone re-lists; a broken stream, or one
silent for longer than the server's own timeout (the watchdog), is re-opened from the last version
seen. Failures are retried after client-go's reflector backoff (0.8 s doubling to 30 s, jittered), so an
apiserver that is down is not hammered; it starts again from 0.8 s once a list succeeds or a watch delivers.
While the apiserver does not answer at all (or answers 503), the wait also ends as soon as it answers again
(reachability.py: one probe for all the informers of a client), so every informer lists again within seconds of
its return, however long the outage was; an answer that asks for a shorter wait (retryAfterSeconds, as a
restarted apiserver's 429 "storage is (re)initializing") is waited instead. A watch line that is not a
watch event is logged and answered with a re-list; an object that cannot be decoded (codec.py's stubs) is
reported through `on_undecodable` and never cached, so it cannot stop the others. Anything else (a bug)
ends `run()` with the exception, for the process's supervisor to see.
Cached objects are trimmed to what the controller decides on, to keep memory flat at scale; with a `shape` (the
fields the trim reads), watch events and answers to writes are decoded straight into it (codec.Shaped).
Writes the controller makes are fed back with `observe_write`, so the next reconcile sees them at once; a write made
`with informer.writing(key)` tells no handler of its own watch event, should that come before its answer (echoes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import aiohttp
import structlog

from mpiop.api.raw import JSON
from mpiop.kube import resourceversion
from mpiop.kube.backoff import Backoff
from mpiop.kube.client import ApiError, Decode, KubeClient, Resource
from mpiop.kube.codec import UNDECODABLE, ListSplitter, Shaped, decode, decode_event, list_metadata
from mpiop.kube.echoes import OwnWrites
from mpiop.kube.reachability import Reachability, unreachable

log = structlog.get_logger(__name__)

Trim = Callable[[JSON], JSON]
Accept = Callable[[JSON], bool]
Indexer = Callable[[JSON], Iterable[str]]
_MAX_TOMBSTONES = 10_000
ChangeHandler = Callable[[JSON | None, JSON | None], None]
"""Called with (old, new): new is None on delete, old is None on add."""
IndexChangeHandler = Callable[[str, str, bool], None]
"""Called with (index, value, present): the value has its first cached object (True) or lost its last (False)."""
UndecodableHandler = Callable[[JSON], None]
"""Called with the stub (codec.py) of an object that cannot be decoded, once per resourceVersion."""


class BadWatchEventError(ValueError):
    """A watch line that is JSON but not a watch event: the stream cannot be trusted, re-list."""


def object_key(obj: JSON) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


@dataclass
class InformerStats:
    lists: int = 0
    watch_restarts: int = 0
    events: int = 0


@dataclass
class Informer:
    client: KubeClient
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    trim: Trim = field(default=lambda obj: obj)
    indexers: dict[str, Indexer] = field(default_factory=dict)
    handlers: list[ChangeHandler] = field(default_factory=list)
    watch_timeout_seconds: int = 300
    page_size: int = 500
    on_watch_restart: Callable[[str], None] | None = None
    # Objects a label selector cannot tell apart (e.g. by owner) are dropped, before trimming, unless accepted.
    accept: Accept | None = None
    on_undecodable: UndecodableHandler | None = None
    backoff: Backoff = field(default_factory=Backoff)
    # A TypedDict of every field `trim`, `accept` and the indexers read: nothing else of a watched object is decoded.
    shape: type[Any] | None = None
    # Told (index, value, present) when a value of an index gets its first object or loses its last.
    on_index_change: IndexChangeHandler | None = None

    _store: dict[str, JSON] = field(default_factory=dict, init=False)
    _indexes: dict[str, defaultdict[str, set[str]]] = field(default_factory=dict, init=False)
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    stats: InformerStats = field(default_factory=InformerStats, init=False)
    _resource_version: str = field(default="", init=False)
    # key -> resourceVersion of its deletion, so a late answer to our own write can't bring back a ghost.
    _tombstones: OrderedDict[str, str] = field(default_factory=OrderedDict, init=False)
    # key -> stub of each undecodable object present (reported once per resourceVersion).
    _undecodable: dict[str, JSON] = field(default_factory=dict, init=False)
    _own_writes: OwnWrites = field(default_factory=OwnWrites, init=False)
    decode_line: Decode = field(init=False, repr=False)
    """A watch line to its event, the object in the shape if one is set (KubeClient.watch's `decoder`)."""
    decode_object: Decode = field(init=False, repr=False)
    """An answer's body for `observe_write` alone (KubeClient.create's `decoder`), in the shape if one is set."""

    def __post_init__(self) -> None:
        self._indexes = {name: defaultdict(set) for name in self.indexers}
        shaped = Shaped(self.shape) if self.shape is not None else None
        self.decode_line = shaped.event if shaped is not None else decode_event
        self.decode_object = shaped.object if shaped is not None else decode

    # -- reading the cache (views: only the informer writes it) ----------------------------------
    def get(self, key: str) -> JSON | None:
        return self._store.get(key)

    def by_index(self, index: str, value: str) -> list[JSON]:
        return [self._store[k] for k in sorted(self._indexes[index].get(value, ())) if k in self._store]

    def cached_keys(self) -> KeysView[str]:
        return self._store.keys()

    def cached_objects(self) -> ValuesView[JSON]:
        return self._store.values()

    def count(self) -> int:
        return len(self._store)

    @property
    def resource_version(self) -> str:
        """The version the next watch starts from: the last list's or event's (bookmarks included)."""
        return self._resource_version

    def undecodable(self) -> Mapping[str, JSON]:
        """The stub (codec.py) of each object present that cannot be decoded, by key."""
        return MappingProxyType(self._undecodable)

    # -- writing the cache -------------------------------------------------------------------------
    def _reindex(self, key: str, old: JSON | None, new: JSON | None) -> None:
        """Move `key` from the index values of `old` to those of `new` (either None: none); a value whose first key
        came or whose last went is told to `on_index_change`."""
        for name, indexer in self.indexers.items():
            before = set(indexer(old)) if old is not None else set()
            after = set(indexer(new)) if new is not None else set()
            if before == after:
                continue
            index = self._indexes[name]
            for value in before - after:
                bucket = index.get(value)
                if bucket is None:
                    continue
                bucket.discard(key)
                if not bucket:
                    del index[value]
                    if self.on_index_change is not None:
                        self.on_index_change(name, value, False)
            for value in after - before:
                bucket = index[value]
                bucket.add(key)
                if len(bucket) == 1 and self.on_index_change is not None:
                    self.on_index_change(name, value, True)

    def _set(self, obj: JSON, notify: bool = True, key: str | None = None) -> None:
        """Cache `obj` (trimmed) under `key` (its object_key, when the caller has it already)."""
        key = object_key(obj) if key is None else key
        if self.accept is not None and not self.accept(obj):
            self._delete(key, notify)  # e.g. no longer owned
            return
        self._put(self.trim(obj), notify, key)

    def _put(self, trimmed: JSON, notify: bool = True, key: str | None = None) -> None:
        key = object_key(trimmed) if key is None else key
        old = self._store.get(key)
        if old is not None and (resourceversion.order(trimmed, resourceversion.of(old)) or 0) < 0:
            return  # a late event: older than what is cached (versions that cannot be ordered are taken)
        self._store[key] = trimmed
        self._reindex(key, old, trimmed)
        if notify and old != trimmed and not self._own_writes.hold(key, old, trimmed):
            self._notify(old, trimmed)

    def _notify(self, old: JSON | None, new: JSON | None) -> None:
        for handler in self.handlers:
            handler(old, new)

    def _delete(self, key: str, notify: bool = True) -> None:
        old = self._store.pop(key, None)
        self._reindex(key, old, None)
        if notify and old is not None:
            self._own_writes.forget(key)
            self._notify(old, None)

    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[None]:
        """Around our own write to `key` (its answer fed to `observe_write` inside): a watch event of it read before
        the answer is told only if it was not this write's (echoes.py)."""
        self._own_writes.begin(key)
        try:
            yield
        finally:
            tell, before = self._own_writes.end(key)
            now = self._store.get(key)
            if tell and before != now and now is not None:
                self._notify(before, now)

    def observe_write(self, obj: JSON) -> None:
        """Feed the apiserver's answer to our own write into the cache (without firing handlers).

        The watch may have delivered the object's deletion before our write's answer arrives; an answer
        no newer than that deletion is dropped instead of resurrecting the object.
        """
        if obj.get("kind") == "Status":
            return
        key = object_key(obj)
        self._own_writes.answered(key, resourceversion.of(obj))
        deleted_at = self._tombstones.get(key)
        if deleted_at is not None and (resourceversion.order(obj, deleted_at) or 0) <= 0:
            return  # not known to be newer: leave it to the watch, which is authoritative
        self._set(obj, notify=False, key=key)

    def observe_delete(self, key: str, resource_version: str | None = None) -> None:
        """Our own deletion, answered: with its resourceVersion, watch events older than it are ignored."""
        self._delete(key, notify=False)
        if resource_version:
            self._tombstone(key, resource_version)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch until cancelled; raises only what is not a failure of the apiserver or its data."""
        while True:
            try:
                await self.relist()
                await self._watch_until_gone()
            except asyncio.CancelledError:
                raise
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError, OSError) as error:
                wait = self.backoff.next()
                log.warning("informer error; re-listing", resource=self.resource.plural, error=str(error)[:500],
                            error_type=type(error).__name__, retry_in=round(wait, 2))
                await self._wait(wait, error)

    async def _wait(self, seconds: float, error: BaseException) -> None:
        """The backoff's wait; cut short when the apiserver, which did not answer (or answered 503: not serving
        this path yet, as right after a restart), answers again, or to what it asked (Retry-After), as
        client-go's REST client waits a Retry-After instead of failing."""
        if isinstance(error, ApiError) and error.retry_after is not None:
            await asyncio.sleep(min(seconds, error.retry_after))
        elif unreachable(error) or (isinstance(error, ApiError) and error.status == 503):
            await Reachability.of(self.client).wait(seconds)
        else:
            await asyncio.sleep(seconds)

    async def relist(self) -> None:
        """List, each object trimmed as it arrives (a big list never sits in memory whole); then make the cache
        what the list saw. The first list is served whole from the apiserver's watch cache, later ones page by
        page from etcd."""
        seen: dict[str, JSON] = {}
        undecodable: dict[str, JSON] = {}
        keep = functools.partial(self._keep, seen, undecodable)
        continue_token: str | None = None
        if self.stats.lists == 0 and not self._store:
            whole, continue_token = await self._list_from_watch_cache(keep)
            if whole:
                self._replace(seen, undecodable)
                return
            if continue_token is None:  # refused: start again, page by page
                seen.clear()
                undecodable.clear()
        await self._list_pages(keep, continue_token)
        self._replace(seen, undecodable)

    def _keep(self, seen: dict[str, JSON], undecodable: dict[str, JSON], item: JSON) -> None:
        """One listed item: trimmed into `seen`, or its stub into `undecodable`; one not accepted is dropped."""
        item.setdefault("kind", self.resource.kind)
        item.setdefault("apiVersion", self.resource.api_version)
        if UNDECODABLE in item:
            undecodable[object_key(item)] = item
            return
        if self.accept is not None and not self.accept(item):
            return
        trimmed = self.trim(item)
        seen[object_key(trimmed)] = trimmed

    async def _list_from_watch_cache(self, keep: Callable[[JSON], None]) -> tuple[bool, str | None]:
        """resourceVersion=0: the apiserver serves the list from its watch cache, whole, instead of reading every
        object from etcd; it is streamed and cut into items as it arrives (client-go's reflector lists the same
        way). Returns (whole, continue token): a token when there is no watch cache and etcd honoured the
        limit; neither when that list was refused."""
        try:
            meta = await self.client.list_each(self.resource, self.namespace, keep, resourceVersion="0",
                                               labelSelector=self.label_selector, limit=self.page_size)
        except ApiError as error:
            log.info("list from the watch cache refused; listing page by page", error=str(error))
            return False, None
        continue_token = meta.get("continue") or None
        if continue_token is None:
            self._resource_version = str(meta["resourceVersion"])
            return True, None
        return False, str(continue_token)

    async def _list_pages(self, keep: Callable[[JSON], None], continue_token: str | None) -> None:
        """Consistent reads, page by page: a cache that is behind must not undo what this informer has already
        seen. The next page is asked for before this one is decoded (its continue token is read off the raw
        body), so the apiserver prepares page n+1 while this process decodes and trims page n."""
        next_page: asyncio.Future[bytes] | None = asyncio.ensure_future(self._page(continue_token))
        try:
            while next_page is not None:
                raw = await next_page
                next_page = None
                head = list_metadata(raw)
                if head is not None and head.get("continue"):
                    next_page = asyncio.ensure_future(self._page(str(head["continue"])))
                splitter = ListSplitter(keep)  # item by item: one undecodable item does not fail the page
                splitter.feed(raw)
                del raw
                page_meta = splitter.close()
                continue_token = page_meta.get("continue")
                if continue_token and next_page is None:  # the token was not found without decoding
                    next_page = asyncio.ensure_future(self._page(str(continue_token)))
                if not continue_token:
                    self._resource_version = str(page_meta["resourceVersion"])
        finally:
            if next_page is not None and not next_page.done():
                next_page.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await next_page

    def _replace(self, seen: dict[str, JSON], undecodable: dict[str, JSON]) -> None:
        """Make the cache what a complete list saw (handlers fire for what changed); the cache is synced."""
        self.stats.lists += 1
        for key in [k for k in self._store if k not in seen]:
            self._delete(key)
        for trimmed in seen.values():
            self._put(trimmed)
        self._undecodable = {k: v for k, v in self._undecodable.items() if k in undecodable}
        for stub in undecodable.values():
            self._report(stub)
        self.backoff.reset()
        self.synced.set()

    def _report(self, stub: JSON) -> None:
        """An undecodable object: reported once per resourceVersion, never cached (nor its older version)."""
        key = object_key(stub)
        self._delete(key)
        version = stub["metadata"].get("resourceVersion")
        known = self._undecodable.get(key)
        if known is not None and known["metadata"].get("resourceVersion") == version:
            return
        self._undecodable[key] = stub
        log.error("object cannot be decoded: skipped until it changes", resource=self.resource.plural, key=key,
                  resource_version=version, error=str(stub[UNDECODABLE])[:300])
        if self.on_undecodable is not None:
            self.on_undecodable(stub)

    async def _page(self, continue_token: str | None) -> bytes:
        return await self.client.list_raw(
            self.resource, self.namespace, labelSelector=self.label_selector, limit=self.page_size,
            **({"continue": continue_token} if continue_token else {}),
        )

    async def _watch_until_gone(self) -> None:
        """Watch from the last version; return when a re-list is needed (410 Gone)."""
        while True:
            try:
                async for event in self.client.watch(
                    self.resource, self.namespace, resource_version=self._resource_version,
                    label_selector=self.label_selector, timeout_seconds=self.watch_timeout_seconds,
                    idle_timeout=self.watch_timeout_seconds + 30, decoder=self.decode_line,
                ):
                    self.backoff.reset()  # the watch delivers
                    if self.apply_event(event):
                        return
            except ApiError as error:
                if error.gone:
                    return
                raise
            except (aiohttp.ClientError, TimeoutError) as error:
                wait = self.backoff.next()
                self._restarted(f"stream broke: {type(error).__name__}: {error}", wait)
                await self._wait(wait, error)
                continue
            self._restarted("server closed the stream")

    def _restarted(self, why: str, wait: float = 0.0) -> None:
        self.stats.watch_restarts += 1
        if self.on_watch_restart is not None:
            self.on_watch_restart(self.resource.plural)
        log.debug("watch restarted", resource=self.resource.plural, reason=why, retry_in=round(wait, 2))

    @staticmethod
    def _checked(event: Any) -> tuple[str, JSON]:
        """(type, object) of a well-formed watch event; BadWatchEventError for anything else."""
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise BadWatchEventError(f"not a watch event: {str(event)[:200]}")
        event_type, obj = event.get("type"), event["object"]
        if event_type in ("ADDED", "MODIFIED", "DELETED") and not (
                isinstance(obj.get("metadata"), dict) and isinstance(obj["metadata"].get("name"), str)):
            raise BadWatchEventError(f"{event_type} event without the object's metadata.name: {str(event)[:200]}")
        if event_type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
            raise BadWatchEventError(f"unknown watch event type {event_type!r}")
        return str(event_type), obj

    def apply_event(self, event: Any) -> bool:
        """Apply one watch event as the watch does; True when the watch has expired and a re-list is due.

        Public so a test can feed what a real apiserver cannot be made to send on cue (a late or expired event).
        """
        event_type, obj = self._checked(event)
        self.stats.events += 1
        if event_type == "ERROR":
            if obj.get("code") == 410:
                return True
            raise ApiError(int(obj.get("code", 500)), obj, "WATCH", self.resource.plural)
        with contextlib.suppress(KeyError, TypeError):
            self._resource_version = str(obj["metadata"]["resourceVersion"])
        if event_type == "BOOKMARK":
            return False
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        if event_type in ("ADDED", "MODIFIED"):
            key = object_key(obj)  # once: a watch of every pod pays each step per event
            deleted_at = self._tombstones.get(key)
            if deleted_at is not None and (order := resourceversion.order(obj, deleted_at)) is not None and order <= 0:
                return False  # an event from before a deletion we already applied (our own, answered first)
            self._tombstones.pop(key, None)
            if UNDECODABLE in obj:
                self._report(obj)
            else:
                self._undecodable.pop(key, None)
                self._set(obj, key=key)
        elif event_type == "DELETED":
            key = object_key(obj)
            self._undecodable.pop(key, None)
            self._delete(key)
            self._tombstone(key, str(obj.get("metadata", {}).get("resourceVersion", "")))
        return False

    def _tombstone(self, key: str, resource_version: str) -> None:
        self._tombstones[key] = resource_version
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > _MAX_TOMBSTONES:
            self._tombstones.popitem(last=False)
