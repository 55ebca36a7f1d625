"""JSON in and out of the apiserver: orjson, the cyclic GC paused over big bodies, lists cut into items as
they stream in (so 10,000 pods are never one 50 MB document in memory)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any, cast

import orjson

JSON = dict[str, Any]

_BIG_BODY = 256 * 1024


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
    one whole item. The list's metadata is read from before or after the items, whichever holds it.
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
                except orjson.JSONDecodeError:
                    self.scan_from = cut + 1  # a nested look-alike: the item goes on
                    continue
                self.handle(item)
                start, self.scan_from = cut + 1, cut + 2
            if start:
                del self.buffer[:start]
                self.scan_from -= start
        finally:
            if enabled:
                gc.enable()

    def close(self) -> JSON:
        """The last item (or none) and the list's metadata, once the body is complete."""
        if not self.in_items:
            whole = decode(bytes(self.buffer))
            for item in whole.get("items") or []:
                self.handle(item)
            return cast(JSON, whole.get("metadata") or {})
        # What is left is `last-item]` plus the list's closing fields: wrapped, it is a JSON object again.
        rest = decode(b'{"items":[' + bytes(self.buffer))
        for item in rest.get("items") or []:
            self.handle(item)
        self.buffer.clear()
        if isinstance(rest.get("metadata"), dict):
            return cast(JSON, rest["metadata"])
        head = decode(self.head + b'"items":[]}')
        return cast(JSON, head.get("metadata") or {})
