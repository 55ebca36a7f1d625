"""Trimming cached objects to what the controller reads: memory stays flat with thousands of pods."""

from __future__ import annotations

from typing import Literal

from mpiop.api.raw import JSON, TrimmedMetadata

_KEPT_METADATA: tuple[Literal["name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp",
                              "creationTimestamp"], ...] = (
    "name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp", "creationTimestamp")


def metadata(obj: JSON) -> TrimmedMetadata:
    """Identity, labels, deletion state, and only the controller owner reference (kind, name, uid)."""
    meta = obj.get("metadata", {})
    kept: TrimmedMetadata = {"ownerReferences": [
        {"kind": o.get("kind"), "name": o.get("name"), "uid": o.get("uid"), "controller": True}
        for o in meta.get("ownerReferences") or [] if o.get("controller")
    ]}
    for key in _KEPT_METADATA:
        if key in meta:
            kept[key] = meta[key]
    return kept
