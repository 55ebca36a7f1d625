"""A raw Kubernetes object as the apiserver sends it and the caches keep it: decoded JSON, the one name for it;
and the metadata every cached (trimmed) object keeps, as a TypedDict so mypy checks the keys a trim writes."""

from __future__ import annotations

from typing import Any, TypeAlias, TypedDict

JSON: TypeAlias = dict[str, Any]


class ControllerReference(TypedDict):
    apiVersion: str | None  # a cached object fed back (Informer.observe_write) is accepted as its whole one was
    kind: str | None
    name: str | None
    uid: str | None
    controller: bool


class TrimmedMetadata(TypedDict, total=False):
    """What every cached object keeps of its metadata (mpiop.kube.trim.metadata)."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    deletionTimestamp: str
    creationTimestamp: str
    ownerReferences: list[ControllerReference]
