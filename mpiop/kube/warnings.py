"""The apiserver's `Warning` headers: each distinct one logged once, and counted.

The apiserver answers a request for a deprecated API version, or a write of an object it would warn about (an
env var that hides an earlier one, a port declared twice, a deprecated node label in a selector), with
`Warning: 299 - "<text>"` (RFC 7234, KEP-1693) beside a 2xx. An operator sending thousands of such writes would
log thousands of lines; none at all leaves a deprecation unseen until the API is gone. So the first of each
text is logged and the rest only counted. The text can hold what a tenant wrote (an env var's name in a pod
template): it is logged through printable() and cut, and at most MAX_KINDS texts are remembered, so a tenant
cannot grow the set or the log without bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import structlog

from mpiop.printable import printable

log = structlog.get_logger(__name__)

MAX_KINDS = 64  # distinct warning texts remembered (and logged); others are counted as `other`
MAX_TEXT = 512  # characters of a warning's text kept
# `299 - "text"`: warn-code, warn-agent (the apiserver sends "-"), quoted text; a header may join several by commas.
_WARNING = re.compile(r'(\d{3}) (\S+) "((?:[^"\\]|\\.)*)"')


def texts(header: str) -> list[str]:
    """The warning texts of one `Warning` header value (quotes and backslash escapes undone)."""
    return [re.sub(r"\\(.)", r"\1", m.group(3)) for m in _WARNING.finditer(header)]


class ApiWarnings:
    """What the apiserver warned about: distinct texts -> how often, each logged once when first seen."""

    def __init__(self, max_kinds: int = MAX_KINDS) -> None:
        self.max_kinds = max_kinds
        self.counts: dict[str, int] = {}
        self.other = 0  # warnings beyond the first max_kinds distinct texts

    def record(self, method: str, resource: str, headers: Iterable[str]) -> None:
        for header in headers:
            for text in texts(header):
                text = printable(text[:MAX_TEXT])
                if text in self.counts:
                    self.counts[text] += 1
                elif len(self.counts) < self.max_kinds:
                    self.counts[text] = 1
                    log.warning("the apiserver warned (logged once per text)", warning=text, verb=method,
                                resource=resource)
                else:
                    self.other += 1

    def total(self) -> int:
        return sum(self.counts.values()) + self.other
