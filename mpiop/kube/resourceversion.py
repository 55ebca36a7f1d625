"""Ordering resourceVersions: the one place mpiop compares them.

The API conventions call a resourceVersion opaque: equality is the only comparison a client may count on,
unless the versions are well-formed. KEP-5504 (comparable resource versions, GA in Kubernetes 1.35, what
apimachinery's `resourceversion.CompareResourceVersion` implements) defines them for two objects of the same
resource as positive decimal integers without leading zeros, ordered by their value. Anything else (an
aggregated API server's own scheme, "0", "") cannot be ordered: `compare` says None, and each caller chooses
what "cannot tell" means for it, never guessing an order.
"""

from __future__ import annotations

from mpiop.api.raw import JSON


def _well_formed(version: str) -> bool:
    return version.isascii() and version.isdigit() and version[0] != "0"


def compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 as `a` is older than, the same as or newer than `b`; None when either is not well-formed."""
    if not (_well_formed(a) and _well_formed(b)):
        return None
    if len(a) != len(b):  # no leading zeros: the longer is the larger, without parsing arbitrary lengths
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def of(obj: JSON) -> str:
    """An object's resourceVersion ("" when it has none)."""
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def order(obj: JSON, version: str) -> int | None:
    """compare(obj's resourceVersion, version)."""
    return compare(of(obj), version)
