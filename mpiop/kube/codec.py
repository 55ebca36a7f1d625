"""JSON in and out of the apiserver: orjson, the cyclic GC paused over big bodies, lists cut into items as
they stream in (so 10,000 pods are never one 50 MB document in memory).

One object that cannot be decoded must never take the others down: a custom resource may nest deeper than
orjson's 1,024 levels (the stdlib's json stops at Python's recursion limit, lower still) wherever its schema
preserves unknown fields. Such an item of a list, or such a watch event, becomes a *stub*: its identity
(apiVersion, kind, metadata but managedFields), read from a copy cut off at a safe depth, and
``UNDECODABLE: why``. The informer reports a stub and never caches it.

An informer that keeps only some fields of its objects decodes them straight into their *shape* (`Shaped`): a
TypedDict naming the fields its trim reads, which msgspec fills while skipping everything else (a pod's
managedFields, spec and most of its status: most of its bytes), so the Python objects for them are never made.
Whatever does not fit the shape (a field of another type, a BOOKMARK or ERROR event, a line too deep to decode)
is decoded whole as above: the trim then sees exactly what it would have.
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Callable
from typing import Any, Generic, TypedDict, TypeVar, cast

import msgspec
import orjson

from mpiop.api.raw import JSON

_BIG_BODY = 256 * 1024
UNDECODABLE = "mpiop.dev/undecodable"
"""The key a stub carries, with why its object could not be decoded."""
_SALVAGE_DEPTH = 32
# A JSON string (escapes included) or a bracket: enough to follow nesting without decoding anything.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def decode(raw: bytes | str) -> Any:
    """JSON as the apiserver sends it, to plain dicts and lists."""
    if len(raw) < _BIG_BODY:
        return orjson.loads(raw)
    # A list page makes ~100,000 containers at once: the cyclic GC would run dozens of times over them
    # (and over the whole cache) for nothing, as JSON cannot hold cycles. Refcounting still frees them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(raw)
    finally:
        if enabled:
            gc.enable()


def encode(obj: Any) -> bytes:
    return orjson.dumps(obj)


def value_end(raw: bytes | bytearray, start: int = 0) -> int | None:
    """Where the JSON object or array starting at `start` ends (one past its bracket); None if it does not."""
    depth = 0
    for token in _TOKEN.finditer(raw, start):
        first = token.group()[:1]
        if first in (b"{", b"["):
            depth += 1
        elif first in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def truncated(raw: bytes | bytearray, max_depth: int = _SALVAGE_DEPTH) -> bytes:
    """`raw` with every object or array nested deeper than `max_depth` replaced by null: decodable by orjson."""
    out: list[bytes] = []
    depth, copied, cut_at = 0, 0, -1
    for token in _TOKEN.finditer(raw):
        first = token.group()[:1]
        if first in (b"{", b"["):
            depth += 1
            if depth == max_depth + 1 and cut_at < 0:
                out.append(bytes(raw[copied:token.start()]))
                cut_at = token.start()
        elif first in (b"}", b"]"):
            if depth == max_depth + 1 and cut_at >= 0:
                out.append(b"null")
                copied, cut_at = token.end(), -1
            depth -= 1
    out.append(bytes(raw[copied:]))
    return b"".join(out)


def stub(obj: Any, why: str) -> JSON | None:
    """An object's identity, from its decoded (truncated) form, marked UNDECODABLE; None without a name."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    if not isinstance(obj["metadata"].get("name"), str):
        return None
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta, UNDECODABLE: why}


def salvage(raw: bytes | bytearray, error: ValueError) -> JSON | None:
    """A stub for a whole object that orjson refused (None if even its metadata cannot be read)."""
    with contextlib.suppress(ValueError):
        return stub(orjson.loads(truncated(raw)), str(error))
    return None


def decode_event(line: bytes) -> Any:
    """One watch line; an event whose object is undecodable carries a stub instead (ValueError if no stub)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as error:
        with contextlib.suppress(ValueError):
            event = orjson.loads(truncated(line))
            if isinstance(event, dict) and (obj := stub(event.get("object"), str(error))) is not None:
                return {"type": event.get("type"), "object": obj}
        raise


_OBJECT_EVENTS = frozenset(("ADDED", "MODIFIED", "DELETED"))
_Shape = TypeVar("_Shape")


class _WatchEvent(TypedDict, Generic[_Shape]):
    type: Any
    object: _Shape


class Shaped:
    """Decoders of one kind's objects and watch lines into `shape` (a TypedDict of the fields its trim reads, every
    leaf `Any`), each falling back to the whole decode above for what does not fit it."""

    def __init__(self, shape: type[Any]) -> None:
        self.shape = shape
        self._object = msgspec.json.Decoder(shape)
        self._event = msgspec.json.Decoder(_WatchEvent[shape])  # type: ignore[valid-type]

    def event(self, line: bytes) -> Any:
        """One watch line: an ADDED, MODIFIED or DELETED event's object in the shape; anything else as decode_event."""
        try:
            event = self._event.decode(line)
        except (msgspec.MsgspecError, RecursionError):
            return decode_event(line)
        if event["type"] not in _OBJECT_EVENTS:  # a BOOKMARK or an ERROR (a Status): read whole
            return decode_event(line)
        return event

    def object(self, raw: bytes) -> Any:
        """An answer's body (the object written) in the shape; anything else (a Status) as decode."""
        try:
            return self._object.decode(raw)
        except (msgspec.MsgspecError, RecursionError):
            return decode(raw)


def list_metadata(raw: bytes) -> JSON | None:
    """A list's own metadata (resourceVersion, continue) without decoding its items; None if not found.

    Typed lists (pods) put `metadata` before `items`, unstructured ones (custom resources) after them.
    """
    with contextlib.suppress(ValueError):
        items = raw.find(b'"items":')
        if items > 0:
            head = decode(raw[:items].rstrip(b", \n") + b"}")
            if isinstance(head, dict) and isinstance(head.get("metadata"), dict):
                return cast(JSON, head["metadata"])
        tail = raw.rfind(b'"metadata":')
        if tail > items > 0:
            end = decode(b"{" + raw[tail:])
            if isinstance(end, dict) and isinstance(end.get("metadata"), dict):
                return cast(JSON, end["metadata"])
    return None


class ListSplitter:
    """Cuts a JSON list body (`{..., "items": [item, item, ...], ...}`) into items as its bytes arrive.

    An item ends where the next one starts: `,` followed by the first item's opening up to its
    `"metadata":{` (`{"metadata":{` for built-in kinds, `{"apiVersion":"g/v","kind":"K","metadata":{` for custom
    resources, whose keys are sorted). A nested object that happens to start the same way only makes a
    candidate that does not parse, and the cut moves on to the next one: every item handed out is exactly
    one whole item. A candidate that is one whole JSON value and still does not parse (too deep) is handed
    out as a stub (see the module), and the list goes on. The list's metadata is read from before or after
    the items, whichever holds it.
    """

    def __init__(self, handle: Callable[[JSON], None]) -> None:
        self.handle = handle
        self.buffer = bytearray()
        self.head = b""
        self.in_items = False
        self.signature: bytes | None = None
        self.scan_from = 1

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        if not self.in_items:
            at = self.buffer.find(b'"items":[')
            if at < 0:
                return
            self.head = bytes(self.buffer[:at])
            del self.buffer[:at + len(b'"items":[')]
            self.in_items = True
        if self.signature is None:
            opening = self.buffer.find(b'"metadata":{')
            if self.buffer[:1] != b"{" or opening < 0:
                return  # no item yet (or an empty list): wait for more, or for close()
            self.signature = b"," + bytes(self.buffer[:opening + len(b'"metadata":{')])
        enabled = gc.isenabled()
        gc.disable()  # thousands of short-lived containers: see decode
        try:
            start = 0
            while (cut := self.buffer.find(self.signature, max(self.scan_from, start + 1))) >= 0:
                try:
                    item = orjson.loads(self.buffer[start:cut])
                except orjson.JSONDecodeError as error:
                    if value_end(self.buffer[start:cut]) != cut - start:
                        self.scan_from = cut + 1  # a nested look-alike: the item goes on
                        continue
                    item = self._salvaged(self.buffer[start:cut], error)
                self.handle(item)
                start, self.scan_from = cut + 1, cut + 2
            if start:
                del self.buffer[:start]
                self.scan_from -= start
        finally:
            if enabled:
                gc.enable()

    @staticmethod
    def _salvaged(raw: bytes | bytearray, error: ValueError) -> JSON:
        item = salvage(raw, error)
        if item is None:
            raise ValueError(f"a list item can be neither decoded nor identified: {error}") from error
        return item

    def _items_one_by_one(self) -> None:
        """Hand out the whole items at the buffer's start one at a time, undecodable ones as stubs."""
        while self.buffer[:1] == b"{" and (end := value_end(self.buffer)) is not None:
            try:
                item = orjson.loads(self.buffer[:end])
            except orjson.JSONDecodeError as error:
                item = self._salvaged(self.buffer[:end], error)
            self.handle(item)
            del self.buffer[:end]
            if self.buffer[:1] == b",":
                del self.buffer[:1]

    def close(self) -> JSON:
        """The last item (or none) and the list's metadata, once the body is complete."""
        if not self.in_items:
            whole = decode(bytes(self.buffer))
            for item in whole.get("items") or []:
                self.handle(item)
            return cast(JSON, whole.get("metadata") or {})
        # What is left is `last-item]` plus the list's closing fields: wrapped, it is a JSON object again.
        try:
            rest = decode(b'{"items":[' + bytes(self.buffer))
        except orjson.JSONDecodeError:
            self._items_one_by_one()  # one of the items left is undecodable
            rest = decode(b'{"items":[' + bytes(self.buffer))
        for item in rest.get("items") or []:
            self.handle(item)
        self.buffer.clear()
        if isinstance(rest.get("metadata"), dict):
            return cast(JSON, rest["metadata"])
        head = decode(self.head + b'"items":[]}')
        return cast(JSON, head.get("metadata") or {})
