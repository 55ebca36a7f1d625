"""Trimming cached objects to what the controller reads: memory stays flat with thousands of pods."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

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


class OwnerReferenceShape(TypedDict, total=False):
    """What `metadata` reads of an owner reference."""

    kind: Any
    name: Any
    uid: Any
    controller: Any


class MetadataShape(TypedDict, total=False):
    """What `metadata` (and an informer's key, version and indexers) read of an object's metadata: the part of a
    shape (codec.Shaped) that every trim shares. Every leaf is Any: a shape only leaves fields out."""

    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: Any
    deletionTimestamp: Any
    creationTimestamp: Any
    ownerReferences: list[OwnerReferenceShape]
