"""Trimming cached objects to what the controller reads: memory stays flat with thousands of pods."""

from __future__ import annotations

from mpiop.api.raw import JSON

_KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp", "creationTimestamp")


def metadata(obj: JSON) -> JSON:
    """Identity, labels, deletion state, and only the controller owner reference (kind, name, uid)."""
    meta = obj.get("metadata", {})
    kept = {k: meta[k] for k in _KEPT_METADATA if k in meta}
    kept["ownerReferences"] = [
        {"kind": o.get("kind"), "name": o.get("name"), "uid": o.get("uid"), "controller": True}
        for o in meta.get("ownerReferences") or [] if o.get("controller")
    ]
    return kept
