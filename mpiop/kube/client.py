"""A thin raw-JSON Kubernetes client: one aiohttp session, plain dicts in and out.

mpiop sends and receives plain dicts, never generated models (their deserialization dominates CPU at
scale), and encodes and decodes them with orjson. Credentials come from a kubeconfig ($KUBECONFIG,
~/.kube/config) or the pod's ServiceAccount, read here directly: client certificates, bearer tokens (also
from a file, re-read like client-go does), basic auth, CA bundles, `insecure-skip-tls-verify`,
`tls-server-name` and `proxy-url`. Only a kubeconfig user with an `exec` plugin or an `auth-provider` is
handed to kubernetes_asyncio's loader, which is imported then and only then: importing it costs ~40 MB of
RSS and most of a second of start-up, for code an in-cluster operator never runs.

The session does not consult the environment per request (aiohttp's `trust_env` looks up proxies and
~/.netrc in a thread for every request); an HTTPS_PROXY/NO_PROXY from the environment is resolved once,
when connecting, for the one apiserver this client talks to.

Every request but watches passes a client-side token bucket (``--kube-api-qps`` / ``--kube-api-burst``),
like client-go's default rate limiter.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from mpiop import __version__

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


USER_AGENT = f"mpiop/{__version__}"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_REFRESH_SECONDS = 60.0  # client-go re-reads a token file at most once a minute


_BIG_BODY = 256 * 1024


def _loads(raw: bytes | str) -> Any:
    if len(raw) < _BIG_BODY:
        return orjson.loads(raw)
    # A list page makes ~100,000 containers at once: the cyclic GC would run dozens of times over them
    # (and over the whole cache) for nothing, as JSON cannot hold cycles. Refcounting still frees them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(raw)
    finally:
        if enabled:
            gc.enable()


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def decode(raw: bytes | str) -> Any:
    """JSON as the apiserver sends it, to plain dicts and lists."""
    return _loads(raw)


def list_metadata(raw: bytes) -> JSON | None:
    """A list's own metadata (resourceVersion, continue) without decoding its items; None if not found.

    Typed lists (pods) put `metadata` before `items`, unstructured ones (custom resources) after them.
    """
    with contextlib.suppress(ValueError):
        items = raw.find(b'"items":')
        if items > 0:
            head = _loads(raw[:items].rstrip(b", \n") + b"}")
            if isinstance(head, dict) and isinstance(head.get("metadata"), dict):
                return cast(JSON, head["metadata"])
        tail = raw.rfind(b'"metadata":')
        if tail > items > 0:
            end = _loads(b"{" + raw[tail:])
            if isinstance(end, dict) and isinstance(end.get("metadata"), dict):
                return cast(JSON, end["metadata"])
    return None


class ListSplitter:
    """Cuts a JSON list body (`{..., "items": [item, item, ...], ...}`) into items as its bytes arrive.

    An item ends where the next one starts: `,` followed by the first item's opening up to its
    `"metadata":{` (`{"metadata":{` for built-in kinds, `{"apiVersion":"g/v","kind":"K","metadata":{` for custom
    resources, whose keys are sorted). A nested object that happens to start the same way only makes a
    candidate that does not parse, and the cut moves on to the next one: every item handed out is exactly
    one whole item. The list's metadata is read from before or after the items, whichever holds it.
    """

    def __init__(self, handle: Callable[[JSON], None]) -> None:
        self.handle = handle
        self.buffer = bytearray()
        self.head = b""
        self.in_items = False
        self.signature: bytes | None = None
        self.scan_from = 1

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        if not self.in_items:
            at = self.buffer.find(b'"items":[')
            if at < 0:
                return
            self.head = bytes(self.buffer[:at])
            del self.buffer[:at + len(b'"items":[')]
            self.in_items = True
        if self.signature is None:
            opening = self.buffer.find(b'"metadata":{')
            if self.buffer[:1] != b"{" or opening < 0:
                return  # no item yet (or an empty list): wait for more, or for close()
            self.signature = b"," + bytes(self.buffer[:opening + len(b'"metadata":{')])
        enabled = gc.isenabled()
        gc.disable()  # thousands of short-lived containers: see _loads
        try:
            start = 0
            while (cut := self.buffer.find(self.signature, max(self.scan_from, start + 1))) >= 0:
                try:
                    item = orjson.loads(self.buffer[start:cut])
                except orjson.JSONDecodeError:
                    self.scan_from = cut + 1  # a nested look-alike: the item goes on
                    continue
                self.handle(item)
                start, self.scan_from = cut + 1, cut + 2
            if start:
                del self.buffer[:start]
                self.scan_from -= start
        finally:
            if enabled:
                gc.enable()

    def close(self) -> JSON:
        """The last item (or none) and the list's metadata, once the body is complete."""
        if not self.in_items:
            whole = _loads(bytes(self.buffer))
            for item in whole.get("items") or []:
                self.handle(item)
            return cast(JSON, whole.get("metadata") or {})
        # What is left is `last-item]` plus the list's closing fields: wrapped, it is a JSON object again.
        rest = _loads(b'{"items":[' + bytes(self.buffer))
        for item in rest.get("items") or []:
            self.handle(item)
        self.buffer.clear()
        if isinstance(rest.get("metadata"), dict):
            return cast(JSON, rest["metadata"])
        head = _loads(self.head + b'"items":[]}')
        return cast(JSON, head.get("metadata") or {})


class ConfigError(Exception):
    """The kubeconfig (or the pod's ServiceAccount) does not say how to reach an apiserver."""


Authorization = Callable[[], Awaitable[str | None]]
"""The Authorization header value for the next request (None: none, e.g. client certificates)."""


async def _no_authorization() -> str | None:
    return None


@dataclass
class ClusterAccess:
    """Where the apiserver is and how this process authenticates to it."""

    server: str
    ssl_context: ssl.SSLContext | None = None  # None for plain http
    tls_server_name: str | None = None
    proxy: URL | None = None
    proxy_auth: aiohttp.BasicAuth | None = None
    authorization: Authorization = _no_authorization
    cleanup: list[Callable[[], Any]] = field(default_factory=list)

    def resolve_proxy(self) -> None:
        """No explicit proxy: take HTTPS_PROXY/HTTP_PROXY (unless NO_PROXY matches) from the environment, once."""
        if self.proxy is None:
            with contextlib.suppress(LookupError):
                self.proxy, self.proxy_auth = get_env_proxy_for_url(URL(self.server))


class _TokenFile:
    """A bearer token read from a file, re-read at most every minute (ServiceAccount tokens rotate)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = ""
        self.read_at = -TOKEN_FILE_REFRESH_SECONDS

    async def __call__(self) -> str | None:
        now = time.monotonic()
        if now - self.read_at >= TOKEN_FILE_REFRESH_SECONDS or not self.token:
            try:
                self.token = self.path.read_text().strip()
                self.read_at = now
            except OSError:
                if not self.token:
                    raise
        return f"Bearer {self.token}" if self.token else None


def _static(value: str) -> Authorization:
    async def authorization() -> str | None:
        return value

    return authorization


def _ssl_context(ca_file: str | None = None, ca_data: str | None = None, insecure: bool = False,
                 cert: tuple[str, str | None] | None = None,
                 cert_data: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(cert[0], keyfile=cert[1])
    elif cert_data is not None:
        # load_cert_chain reads files only: write them to a private directory, load, and remove them.
        with tempfile.TemporaryDirectory(prefix="mpiop-tls-") as directory:
            cert_path, key_path = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            for path, data in ((cert_path, cert_data[0]), (key_path, cert_data[1])):
                path.touch(mode=0o600)
                path.write_bytes(data)
            context.load_cert_chain(str(cert_path), keyfile=str(key_path))
    return context


def _named(entries: Any, name: str | None, kind: str) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return cast(dict[str, Any], entry.get(kind) or {})
    raise ConfigError(f"kubeconfig has no {kind} named {name!r}")


def load_kubeconfig(path: Path, context: str | None = None) -> ClusterAccess | None:
    """ClusterAccess from a kubeconfig file, or None when its user needs an exec plugin or auth-provider."""
    config = yaml.safe_load(path.read_text()) or {}
    context_name = context or config.get("current-context")
    if not context_name:
        raise ConfigError(f"{path}: no context given and no current-context")
    selected = _named(config.get("contexts"), context_name, "context")
    cluster = _named(config.get("clusters"), selected.get("cluster"), "cluster")
    user = _named(config.get("users"), selected["user"], "user") if selected.get("user") else {}
    if user.get("exec") or user.get("auth-provider"):
        return None
    base = path.resolve().parent

    def file(value: str) -> str:  # paths in a kubeconfig are relative to the kubeconfig
        return str(base / Path(value).expanduser())

    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"{path}: cluster {selected.get('cluster')!r} has no server")
    access = ClusterAccess(server=server, tls_server_name=cluster.get("tls-server-name") or None)
    if cluster.get("proxy-url"):
        access.proxy = URL(cluster["proxy-url"])
    if server.startswith("https://"):
        cert: tuple[str, str | None] | None = None
        cert_data: tuple[bytes, bytes] | None = None
        if user.get("client-certificate-data") and user.get("client-key-data"):
            cert_data = (base64.b64decode(user["client-certificate-data"]), base64.b64decode(user["client-key-data"]))
        elif user.get("client-certificate") and user.get("client-key"):
            cert = (file(user["client-certificate"]), file(user["client-key"]))
        ca_data = base64.b64decode(cluster["certificate-authority-data"]).decode() \
            if cluster.get("certificate-authority-data") else None
        ca_file = file(cluster["certificate-authority"]) if cluster.get("certificate-authority") and not ca_data \
            else None
        access.ssl_context = _ssl_context(ca_file, ca_data, bool(cluster.get("insecure-skip-tls-verify")),
                                          cert, cert_data)
    if user.get("token"):
        access.authorization = _static(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        access.authorization = _TokenFile(Path(file(user["tokenFile"])))
    elif user.get("username") and user.get("password"):
        credentials = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        access.authorization = _static(f"Basic {credentials}")
    return access


def load_incluster(directory: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The pod's ServiceAccount: KUBERNETES_SERVICE_HOST/PORT, its CA and its (rotating) token."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set, and no kubeconfig was found")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    token = _TokenFile(directory / "token")
    if not token.path.is_file():
        raise ConfigError(f"no ServiceAccount token at {token.path}")
    return ClusterAccess(server=f"https://{host}:{port}", ssl_context=_ssl_context(str(directory / "ca.crt")),
                         authorization=token)


async def _load_with_kubernetes_asyncio(path: Path, context: str | None) -> ClusterAccess:
    """exec plugins and auth-providers: kubernetes_asyncio runs them (and refreshes their credentials)."""
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=str(path), context=context, client_configuration=configuration,
                                      persist_config=False)
    host = str(configuration.host or "")
    context_ssl = None
    if host.startswith("https://"):
        context_ssl = _ssl_context(
            configuration.ssl_ca_cert, insecure=not configuration.verify_ssl,
            cert=(configuration.cert_file, configuration.key_file) if configuration.cert_file else None,
        )

    async def authorization() -> str | None:
        settings = (await configuration.auth_settings()).get("BearerToken")
        return cast(str, settings["value"]) if settings else None

    access = ClusterAccess(server=host.rstrip("/"), ssl_context=context_ssl,
                           tls_server_name=configuration.tls_server_name or None, authorization=authorization)
    if configuration.proxy:
        access.proxy = URL(configuration.proxy)
    return access


async def load_access(kubeconfig: str | None = None, context: str | None = None) -> ClusterAccess:
    """From a kubeconfig (the argument, else $KUBECONFIG's first file, else ~/.kube/config), else in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not path and Path("~/.kube/config").expanduser().is_file():
        path = str(Path("~/.kube/config").expanduser())
    if not path:
        access = load_incluster()
    else:
        access = load_kubeconfig(Path(path).expanduser(), context) or await _load_with_kubernetes_asyncio(
            Path(path).expanduser(), context)
    access.resolve_proxy()
    return access


class KubeClient:
    """Raw JSON requests against one apiserver."""

    def __init__(self, access: ClusterAccess, qps: float = 50.0, burst: int = 100,
                 observer: RequestObserver | None = None, field_manager: str = "mpiop") -> None:
        self.access = access
        self.limiter = TokenBucket(qps, burst)
        self.observer = observer
        self.field_manager = field_manager
        # Connections to the apiserver in parallel: at least the burst, so the bucket is the only limit.
        self.max_connections = max(burst, 100)
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, context: str | None = None,
                      qps: float = 50.0, burst: int = 100, observer: RequestObserver | None = None,
                      field_manager: str = "mpiop") -> KubeClient:
        """From a kubeconfig ($KUBECONFIG, ~/.kube/config), else the in-cluster ServiceAccount."""
        access = await load_access(kubeconfig, context)
        return cls(access, qps=qps, burst=burst, observer=observer, field_manager=field_manager)

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
                    content_type: str, timeout: float | aiohttp.ClientTimeout | None) -> aiohttp.ClientResponse:
        headers = {"Content-Type": content_type, "Accept": "application/json", "User-Agent": USER_AGENT}
        if (authorization := await self.access.authorization()) is not None:
            headers["Authorization"] = authorization
        params = [(k, ("true" if v else "false") if isinstance(v, bool) else v)
                  for k, v in (query or {}).items() if v is not None]
        data = None if body is None else body if isinstance(body, bytes | str) else _dumps(body)
        if timeout is not None and not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=timeout)
        return await self.session.request(
            method, self.access.server + path, params=params, data=data, headers=headers,
            timeout=timeout if timeout is not None else aiohttp.ClientTimeout(total=None),
            proxy=self.access.proxy, proxy_auth=self.access.proxy_auth,
            server_hostname=self.access.tls_server_name,
        )

    async def request_raw(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                          body: Any = None, content_type: str = "application/json",
                          timeout: float = 60.0) -> bytes:
        """One request through the rate limiter; the undecoded body of a 2xx answer, else ApiError."""
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
        if not 200 <= status <= 299:
            try:
                decoded: Any = _loads(raw) if raw else {}
            except ValueError:
                decoded = raw.decode(errors="replace")
            raise ApiError(status, decoded, method, path)
        return raw

    async def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json",
                      timeout: float = 60.0) -> JSON:
        raw = await self.request_raw(method, path, query=query, body=body, content_type=content_type,
                                     timeout=timeout)
        try:
            decoded: Any = _loads(raw) if raw else {}
        except ValueError:
            decoded = raw.decode(errors="replace")
        return cast(JSON, decoded) if isinstance(decoded, dict) else {}

    # -- verbs -------------------------------------------------------------------------------------
    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        return await self.request("GET", resource.path(namespace, name))

    async def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> JSON:
        return await self.request("GET", resource.path(namespace), query=query)

    async def list_raw(self, resource: Resource, namespace: str | None = None, **query: Any) -> bytes:
        """A list's undecoded body: `list_metadata` reads its continue token without decoding the items."""
        return await self.request_raw("GET", resource.path(namespace), query=query)

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

    async def list_each(self, resource: Resource, namespace: str | None, handle: Callable[[JSON], None],
                        **query: Any) -> JSON:
        """One unpaginated list, streamed: `handle` gets each item as soon as its bytes have arrived.

        For a list the apiserver answers whole (resourceVersion=0 is served from its watch cache, which
        ignores `limit`): however many items, only a few hundred KiB of it are in memory at once. Returns the
        list's own metadata (resourceVersion).
        """
        await self.limiter.acquire()
        path = resource.path(namespace)
        started = time.monotonic()
        status = 0
        try:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
            response = await self._send("GET", path, query, None, "application/json", timeout)
            async with response:
                status = response.status
                if status != 200:
                    raw = await response.read()
                    try:
                        body: Any = _loads(raw)
                    except ValueError:
                        body = raw.decode(errors="replace")
                    raise ApiError(status, body, "GET", path)
                splitter = ListSplitter(handle)
                async for chunk in response.content.iter_chunked(256 * 1024):
                    splitter.feed(chunk)
                return splitter.close()
        finally:
            if self.observer is not None:
                self.observer("GET", _resource_of(path), status, time.monotonic() - started)

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
                    body: Any = _loads(raw)
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
                        yield cast(JSON, _loads(line))
