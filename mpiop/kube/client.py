"""A thin raw-JSON Kubernetes client over kubernetes_asyncio's configuration and HTTP session.

kubernetes_asyncio loads kubeconfig / in-cluster credentials and owns the aiohttp session; mpiop sends
and receives plain dicts, never the generated models (their deserialization dominates CPU at scale).
Every request but watches passes a client-side token bucket (``--kube-api-qps`` / ``--kube-api-burst``),
like client-go's default rate limiter.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

JSON = dict[str, Any]
RequestObserver = Callable[[str, str, int, float], None]
"""Called after each request with (verb, resource, HTTP status or 0, seconds)."""


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                namespaced=False)


class ApiError(Exception):
    """A non-2xx answer from the apiserver, with its Status object's reason and message."""

    def __init__(self, status: int, body: JSON | str, method: str, path: str) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {}
        self.reason: str = self.body.get("reason", "") if self.body else ""
        self.message: str = self.body.get("message", str(body)) if self.body else str(body)
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def invalid(self) -> bool:
        """The apiserver refused the object itself (422 Invalid, or 400 BadRequest): retrying won't help."""
        return self.status in (400, 422)


class TokenBucket:
    """client-go's token bucket: `burst` requests at once, refilled at `qps` per second."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.capacity = float(max(burst, 1))
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        async with self._lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.qps)
            self.updated = now
            if self.tokens < 1:
                await asyncio.sleep((1 - self.tokens) / self.qps)
                self.tokens = 1.0
                self.updated = time.monotonic()
            self.tokens -= 1


def _resource_of(path: str) -> str:
    """The plural (and subresource) a path addresses, for metrics labels."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[i + 2:] if len(parts) > i + 2 else ["namespaces"]
    elif parts and parts[0] in ("api", "apis"):
        parts = parts[2:] if parts[0] == "api" else parts[3:]
    if not parts:
        return ""
    resource = parts[0]
    return f"{resource}/{parts[2]}" if len(parts) >= 3 else resource


class KubeClient:
    """Raw JSON requests against one apiserver."""

    def __init__(self, api_client: k8s_client.ApiClient, qps: float = 50.0, burst: int = 100,
                 observer: RequestObserver | None = None, field_manager: str = "mpiop") -> None:
        self.api = api_client
        self.limiter = TokenBucket(qps, burst)
        self.observer = observer
        self.field_manager = field_manager

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, context: str | None = None,
                      qps: float = 50.0, burst: int = 100, observer: RequestObserver | None = None,
                      field_manager: str = "mpiop") -> KubeClient:
        """From a kubeconfig ($KUBECONFIG, ~/.kube/config), else the in-cluster ServiceAccount."""
        configuration = k8s_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        if not path and Path("~/.kube/config").expanduser().is_file():
            path = str(Path("~/.kube/config").expanduser())
        if path:
            await k8s_config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        # Connections to the apiserver in parallel: at least the burst, so the bucket is the only limit.
        configuration.connection_pool_maxsize = max(burst, 100)
        api = k8s_client.ApiClient(configuration=configuration)
        return cls(api, qps=qps, burst=burst, observer=observer, field_manager=field_manager)

    async def close(self) -> None:
        await self.api.close()

    async def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
                    content_type: str, timeout: float | aiohttp.ClientTimeout | None) -> aiohttp.ClientResponse:
        response = await self.api.call_api(
            path, method,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return cast(aiohttp.ClientResponse, response)

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float = 60.0) -> JSON:
        await self.limiter.acquire()
        started = time.monotonic()
        status = 0
        try:
            response = await self._send(method, path, query, body, content_type, timeout)
            async with response:
                status = response.status
                raw = await response.read()
        finally:
            if self.observer is not None:
                self.observer(method, _resource_of(path), status, time.monotonic() - started)
        try:
            decoded: Any = json.loads(raw) if raw else {}
        except ValueError:
            decoded = raw.decode(errors="replace")
        if not 200 <= status <= 299:
            raise ApiError(status, decoded, method, path)
        return cast(JSON, decoded) if isinstance(decoded, dict) else {}

    # -- verbs -------------------------------------------------------------------------------------
    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return await self.request("GET", resource.path(namespace, name))

    async def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> JSON:
        return await self.request("GET", resource.path(namespace), query=query)

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        return await self.request("POST", resource.path(namespace), body=body,
                                  query={"fieldManager": self.field_manager})

    async def replace(self, resource: Resource, namespace: str | None, name: str, body: JSON,
                      subresource: str | None = None) -> JSON:
        return await self.request("PUT", resource.path(namespace, name, subresource), body=body,
                                  query={"fieldManager": self.field_manager})

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: JSON,
                    subresource: str | None = None, patch_type: str = "merge") -> JSON:
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        return await self.request("PATCH", resource.path(namespace, name, subresource), body=body,
                                  content_type=content_type, query={"fieldManager": self.field_manager})

    async def delete(self, resource: Resource, namespace: str | None, name: str, *,
                     propagation: str = "Background", uid: str | None = None,
                     grace_period_seconds: int | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self.request("DELETE", resource.path(namespace, name), body=options)

    async def watch(self, resource: Resource, namespace: str | None, *, resource_version: str,
                    label_selector: str | None = None, timeout_seconds: int = 300,
                    idle_timeout: float | None = None) -> AsyncIterator[JSON]:
        """Yield watch events ({type, object}) as raw dicts until the server closes the stream.

        `idle_timeout` is a watchdog: a stream silent for longer raises TimeoutError.
        """
        path = resource.path(namespace)
        query = {
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds), "labelSelector": label_selector,
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=idle_timeout)
        started = time.monotonic()
        response = await self._send("GET", path, query, None, "application/json", timeout)
        if self.observer is not None:
            self.observer("WATCH", _resource_of(path), response.status, time.monotonic() - started)
        async with response:
            if response.status != 200:
                raw = await response.read()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                raise ApiError(response.status, body, "WATCH", path)
            # Split the chunked stream ourselves: aiohttp's readline() refuses lines over 128 KiB,
            # and a Pod or MPIJob with a large template can be longer.
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield cast(JSON, json.loads(line))
