"""A raw Kubernetes object as the apiserver sends it and the caches keep it: decoded JSON, the one name for it."""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = dict[str, Any]
