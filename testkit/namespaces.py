"""Namespaces for tests and the bench: made ready for Pods, and deleted (optionally waiting until gone)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from mpiop.kube.client import NAMESPACES, ApiError, KubeClient, Resource

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


async def create_namespace(kube: KubeClient, name: str, timeout: float = 30.0) -> str:
    """Create `name` and wait until its default ServiceAccount exists (before that, Pods are refused)."""
    await kube.create(NAMESPACES, None, {"metadata": {"name": name}})
    deadline = time.monotonic() + timeout
    while await kube.get_or_none(SERVICEACCOUNTS, name, "default") is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name} has no default ServiceAccount after {timeout:.0f}s")
        await asyncio.sleep(0.05)  # poll interval: the ServiceAccount controller makes it within seconds
    return name


async def delete_namespace(kube: KubeClient, name: str, *, wait: float = 0.0) -> float:
    """Delete `name`; with `wait`, until it is gone (seconds taken), else at once (0.0)."""
    started = time.monotonic()
    with contextlib.suppress(ApiError):
        await kube.delete(NAMESPACES, None, name)
    if not wait:
        return 0.0
    while time.monotonic() - started < wait:
        if await kube.get_or_none(NAMESPACES, None, name) is None:
            return time.monotonic() - started
        await asyncio.sleep(0.5)  # poll interval: a namespace's finalization takes seconds
    raise TimeoutError(f"namespace {name} still there after {wait:.0f}s")
