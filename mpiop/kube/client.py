"""A thin raw-JSON Kubernetes client: one aiohttp session, plain dicts in and out.

mpiop sends and receives plain dicts, never generated models (their deserialization dominates CPU at
scale), and encodes and decodes them with orjson (``codec.py``). How it reaches the apiserver is
``access.py``'s.

The session does not consult the environment per request (aiohttp's `trust_env` looks up proxies and
~/.netrc in a thread for every request); an HTTPS_PROXY/NO_PROXY from the environment is resolved once,
when connecting, for the one apiserver this client talks to.

Every request but watches passes a client-side token bucket (``ratelimit.py``: ``--kube-api-qps`` /
``--kube-api-burst``), like client-go's default rate limiter; ``mpiop run`` has it off by default (qps 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypedDict, Unpack, cast

import aiohttp
import yarl

from mpiop import __version__
from mpiop.api.raw import JSON
from mpiop.kube.access import ClusterAccess, load_access
from mpiop.kube.codec import ListSplitter, Shaped, decode, decode_event, encode
from mpiop.kube.ratelimit import TokenBucket
from mpiop.kube.warnings import ApiWarnings

RequestObserver = Callable[[str, str, int, float], None]
"""Called after each request with (verb, resource, HTTP status or 0, seconds)."""
WriteGuard = Callable[[str, str], None]
"""Called with (method, path) as each write is about to leave (after the rate limiter); raises to refuse it."""
RequestHook = Callable[[str, str, Mapping[str, Any]], None]
"""Called with (method, path, query) as each request that the write guard let through leaves."""


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
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
BATCH_JOBS = Resource("batch", "v1", "jobs", "Job")
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
# Taints put on devices by a cluster admin (resource.k8s.io/v1 from Kubernetes 1.37; read to name a device a rule
# evicted a worker for: controller/devices.py).
DEVICE_TAINT_RULES = Resource("resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", namespaced=False)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
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
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def retry_after(self) -> float | None:
        """Seconds the apiserver asked to wait before trying again (its Status's details.retryAfterSeconds, as
        on a 429 "storage is (re)initializing" right after it started), or None."""
        details = self.body.get("details") if self.body else None
        seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None

    @property
    def invalid(self) -> bool:
        """The apiserver refused the object itself (422 Invalid, or 400 BadRequest): retrying won't help."""
        return self.status in (400, 422)


@functools.lru_cache(maxsize=4096)
def _resource_of(path: str) -> str:
    """The plural (and subresource) a path addresses, for metrics labels; cached, as it is read for every request
    (most paths repeat: a kind's collection, each job's status)."""
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


Decode = Callable[[bytes], Any]
"""Bytes of JSON to what they hold: codec.decode, or an informer's `Shaped` decoder of its kind's objects."""


def _decoded(raw: bytes, decoder: Decode = decode) -> Any:
    """A body as JSON; as text when it is not JSON (e.g. a proxy's error page)."""
    try:
        return decoder(raw) if raw else {}
    except ValueError:
        return raw.decode(errors="replace")


async def _raise_for(response: aiohttp.ClientResponse, method: str, path: str) -> None:
    """ApiError, with the Status the apiserver sent, for an answer that is not 2xx."""
    if not 200 <= response.status <= 299:
        raise ApiError(response.status, _decoded(await response.read()), method, path)


@dataclass
class _Timing:
    status: int = 0  # 0: no answer (a connection error)


USER_AGENT = f"mpiop/{__version__}"
JSON_MEDIA_TYPE = "application/json"
# A list answer of metadata only (what client-go's metadata client asks for), plain JSON from a server without it.
METADATA_LIST_MEDIA_TYPE = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"


class _Name(TypedDict, total=False):
    name: Any


class _Named(TypedDict, total=False):
    metadata: _Name


class _NamedList(TypedDict, total=False):
    """What delete_collection reads of its answer: the deleted objects' names (a list of 8 pods' metadata is
    ~27 KB, nearly all managedFields)."""

    items: list[_Named]


_NAMES = Shaped(_NamedList)


class ClientOptions(TypedDict, total=False):
    """KubeClient's keyword arguments (their defaults are the constructor's), for connect() to pass on."""

    qps: float
    burst: int
    observer: RequestObserver | None
    field_manager: str
    write_guard: WriteGuard | None
    on_request: RequestHook | None


class _Watchdog:
    """Closes a stream that has been silent for `seconds` (None: never), on one timer checked against the time of
    its last chunk (`last`, which the reader sets). aiohttp's sock_read re-arms a timer on every chunk the socket
    delivers: a watch of every pod in a cluster pays that for each event."""

    def __init__(self, response: aiohttp.ClientResponse, seconds: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.response, self.seconds = response, seconds
        self.last = self.loop.time()
        self.fired = False
        self._handle = None if seconds is None else self.loop.call_later(seconds, self._check)

    def _check(self) -> None:
        assert self.seconds is not None  # only armed with seconds
        silent = self.loop.time() - self.last
        if silent >= self.seconds:
            self.fired = True
            self.response.close()
        else:
            self._handle = self.loop.call_later(self.seconds - silent, self._check)

    def raise_if_fired(self, cause: BaseException | None = None) -> None:
        """TimeoutError if the stream ended because the watchdog closed it."""
        if self.fired:
            raise TimeoutError(f"watch silent for {self.seconds:g}s") from cause

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


@functools.lru_cache(maxsize=1024)
def request_url(server: str, path: str, query: tuple[tuple[str, str], ...]) -> yarl.URL:
    """The request's URL, its query encoded by the stdlib and the whole taken as encoded: yarl's own query
    building checked each value against its ABCs, a share of every request's CPU. Cached: a burst's creations
    share a few (path, fieldManager) URLs."""
    return yarl.URL(server + path + ("?" + urllib.parse.urlencode(query) if query else ""), encoded=True)


class KubeClient:
    """Raw JSON requests against one apiserver."""

    def __init__(self, access: ClusterAccess, qps: float = 50.0, burst: int = 100,
                 observer: RequestObserver | None = None, field_manager: str = "mpiop",
                 write_guard: WriteGuard | None = None, on_request: RequestHook | None = None) -> None:
        """`write_guard`: e.g. leader election's, so no write leaves once the lease may be another's.
        `on_request`: e.g. a test noting every request as the apiserver's authorizer will see it."""
        self.access = access
        self.limiter = TokenBucket(qps, burst)
        self.observer = observer
        self.field_manager = field_manager
        self.write_guard = write_guard
        self.on_request = on_request
        self.warnings = ApiWarnings()  # the apiserver's Warning headers, each text logged once
        # Connections to the apiserver in parallel: at least the burst, so the bucket is the only limit.
        self.max_connections = max(burst, 100)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, context: str | None = None,
                      **options: Unpack[ClientOptions]) -> Self:
        """From a kubeconfig ($KUBECONFIG, ~/.kube/config), else the in-cluster ServiceAccount."""
        return cls(await load_access(kubeconfig, context), **options)

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session, made on first use (inside the event loop that uses it)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections,
                                             ssl=self.access.ssl_context if self.access.ssl_context else True)
            # Watch events of large objects (e.g. a CRD) can exceed aiohttp's default read buffer.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        for cleanup in self.access.cleanup:
            cleanup()

    async def _send(self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
                    content_type: str, timeout: float | aiohttp.ClientTimeout | None,
                    accept: str = JSON_MEDIA_TYPE) -> aiohttp.ClientResponse:
        if self.write_guard is not None and method not in ("GET", "HEAD"):
            self.write_guard(method, path)
        if self.on_request is not None:
            self.on_request(method, path, query or {})
        headers = {"Content-Type": content_type, "Accept": accept, "User-Agent": USER_AGENT}
        if (authorization := await self.access.authorization()) is not None:
            headers["Authorization"] = authorization
        params = tuple((k, ("true" if v else "false") if isinstance(v, bool) else str(v))
                       for k, v in (query or {}).items() if v is not None)
        data = None if body is None else body if isinstance(body, bytes | str) else encode(body)
        if timeout is not None and not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=timeout)
        response = await self.session.request(
            method, request_url(self.access.server, path, params), data=data, headers=headers,
            timeout=timeout if timeout is not None else aiohttp.ClientTimeout(total=None),
            proxy=self.access.proxy, proxy_auth=self.access.proxy_auth,
            server_hostname=self.access.tls_server_name,
        )
        if warned := response.headers.getall("Warning", ()):
            self.warnings.record(method, _resource_of(path), warned)
        return response

    async def request_raw(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                          body: Any = None, content_type: str = "application/json",
                          timeout: float = 60.0, accept: str = JSON_MEDIA_TYPE) -> bytes:
        """One request through the rate limiter; the undecoded body of a 2xx answer, else ApiError."""
        await self.limiter.acquire()
        with self._timed(method, path) as timing:
            response = await self._send(method, path, query, body, content_type, timeout, accept)
            async with response:
                timing.status = response.status
                await _raise_for(response, method, path)
                return await response.read()

    @contextlib.contextmanager
    def _timed(self, verb: str, path: str) -> Iterator[_Timing]:
        """Tell the observer how long what the block does took, and the status it set."""
        timing, started = _Timing(), time.monotonic()
        try:
            yield timing
        finally:
            if self.observer is not None:
                self.observer(verb, _resource_of(path), timing.status, time.monotonic() - started)

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float = 60.0, accept: str = JSON_MEDIA_TYPE, decoder: Decode = decode) -> JSON:
        """The answer decoded: `decoder` may be an informer's (`Informer.decode_object`), for an answer only fed to its
        cache."""
        decoded = _decoded(await self.request_raw(method, path, query=query, body=body, content_type=content_type,
                                                  timeout=timeout, accept=accept), decoder)
        return cast(JSON, decoded) if isinstance(decoded, dict) else {}

    # -- verbs -------------------------------------------------------------------------------------
    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return await self.request("GET", resource.path(namespace, name))

    async def get_or_none(self, resource: Resource, namespace: str | None, name: str) -> JSON | None:
        """The object, or None when it does not exist (any other error is raised)."""
        try:
            return await self.get(resource, namespace, name)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    async def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> JSON:
        return await self.request("GET", resource.path(namespace), query=query)

    async def list_raw(self, resource: Resource, namespace: str | None = None, **query: Any) -> bytes:
        """A list's undecoded body: `list_metadata` reads its continue token without decoding the items."""
        return await self.request_raw("GET", resource.path(namespace), query=query)

    async def create(self, resource: Resource, namespace: str | None, body: JSON, *, decoder: Decode = decode) -> JSON:
        return await self.request("POST", resource.path(namespace), body=body,
                                  query={"fieldManager": self.field_manager}, decoder=decoder)

    async def replace(self, resource: Resource, namespace: str | None, name: str, body: JSON,
                      subresource: str | None = None) -> JSON:
        return await self.request("PUT", resource.path(namespace, name, subresource), body=body,
                                  query={"fieldManager": self.field_manager})

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: JSON | Sequence[JSON],
                    subresource: str | None = None, patch_type: str = "merge", decoder: Decode = decode) -> JSON:
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        return await self.request("PATCH", resource.path(namespace, name, subresource), body=body,
                                  content_type=content_type, query={"fieldManager": self.field_manager},
                                  decoder=decoder)

    async def delete(self, resource: Resource, namespace: str | None, name: str, *,
                     propagation: str = "Background", uid: str | None = None,
                     grace_period_seconds: int | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self.request("DELETE", resource.path(namespace, name), body=options)

    async def delete_if_present(self, resource: Resource, namespace: str | None, name: str, *,
                                propagation: str = "Background", uid: str | None = None) -> JSON | None:
        """DELETE where "already gone" is success (controller-runtime's client.IgnoreNotFound); None then.

        404: gone already. 409: the uid precondition failed, so the name now holds a newer object than the one
        meant, which is left alone.
        """
        try:
            return await self.delete(resource, namespace, name, propagation=propagation, uid=uid)
        except ApiError as error:
            if error.not_found or error.conflict:
                return None
            raise

    async def delete_collection(self, resource: Resource, namespace: str, *, label_selector: str,
                                field_selector: str | None = None, propagation: str = "Background") -> set[str]:
        """Delete every object the selectors match in one request; the names of those it deleted.

        The apiserver lists the matches first: resourceVersion=0 has it list from its watch cache (in memory)
        instead of reading the whole namespace from etcd, which at 10,000 pods took seconds per request. That
        cache may be a moment behind (or, with several apiservers, behind the one the caller watches): what it
        did not list was not deleted, which is why the names are returned. Only the deleted objects' metadata
        is asked for (a PartialObjectMetadataList): for 8 pods the answer is 18 KB instead of 30 KB, and costs
        the apiserver ~20% less CPU to encode.
        """
        query = {"labelSelector": label_selector, "fieldSelector": field_selector, "resourceVersion": "0"}
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        answer = await self.request("DELETE", resource.path(namespace), query=query, body=options,
                                    accept=METADATA_LIST_MEDIA_TYPE, decoder=_NAMES.object)
        return {str(item["metadata"]["name"]) for item in answer.get("items") or []}

    async def list_each(self, resource: Resource, namespace: str | None, handle: Callable[[JSON], None],
                        **query: Any) -> JSON:
        """One unpaginated list, streamed: `handle` gets each item as soon as its bytes have arrived.

        For a list the apiserver answers whole (resourceVersion=0 is served from its watch cache, which
        ignores `limit`): however many items, only a few hundred KiB of it are in memory at once. Returns the
        list's own metadata (resourceVersion).
        """
        await self.limiter.acquire()
        path = resource.path(namespace)
        with self._timed("GET", path) as timing:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
            response = await self._send("GET", path, query, None, "application/json", timeout)
            async with response:
                timing.status = response.status
                await _raise_for(response, "GET", path)
                splitter = ListSplitter(handle)
                async for chunk in response.content.iter_chunked(256 * 1024):
                    splitter.feed(chunk)
                return splitter.close()

    async def stream(self, path: str, query: Mapping[str, Any] | None = None) -> AsyncIterator[bytes]:
        """A GET whose answer is read as it comes (a followed pod log), chunk by chunk, until the server ends it."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        with self._timed("GET", path) as timing:
            response = await self._send("GET", path, query, None, "application/json", timeout, accept="*/*")
            timing.status = response.status
        async with response:
            await _raise_for(response, "GET", path)
            async for chunk in response.content.iter_any():
                yield chunk

    async def watch(self, resource: Resource, namespace: str | None, *, resource_version: str,
                    label_selector: str | None = None, timeout_seconds: int = 300,
                    idle_timeout: float | None = None, decoder: Decode = decode_event) -> AsyncIterator[JSON]:
        """Yield watch events ({type, object}) as raw dicts until the server closes the stream; each line decoded
        by `decoder` (an informer's `Shaped.event` keeps only what it reads of the object).

        `idle_timeout` is a watchdog: a stream silent for longer raises TimeoutError. An event whose object
        is too deep to decode carries codec.py's stub instead; a line that is not JSON raises ValueError.
        """
        path = resource.path(namespace)
        query = {
            "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds), "labelSelector": label_selector,
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        with self._timed("WATCH", path) as timing:  # until the answer's headers: the stream lasts minutes
            async with asyncio.timeout(idle_timeout):
                response = await self._send("GET", path, query, None, "application/json", timeout)
            timing.status = response.status
        async with response:
            await _raise_for(response, "WATCH", path)
            watchdog = _Watchdog(response, idle_timeout)
            try:
                # Split the chunked stream ourselves: aiohttp's readline() refuses lines over 128 KiB,
                # and a Pod or MPIJob with a large template can be longer.
                pending = b""
                async for chunk in response.content.iter_any():
                    watchdog.last = watchdog.loop.time()
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield cast(JSON, decoder(line))
            except aiohttp.ClientError as error:
                watchdog.raise_if_fired(error)
                raise
            finally:
                watchdog.cancel()
            watchdog.raise_if_fired()
