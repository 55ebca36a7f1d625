"""How this process reaches and authenticates to the apiserver, read without kubernetes_asyncio.

A kubeconfig ($KUBECONFIG, ~/.kube/config) or the pod's ServiceAccount: client certificates, bearer tokens
(also from a file, re-read like client-go does), basic auth, CA bundles, `insecure-skip-tls-verify`,
`tls-server-name` and `proxy-url`. Only a kubeconfig user with an `exec` plugin or an `auth-provider` is
handed to kubernetes_asyncio's loader, which is imported then and only then: importing it costs ~40 MB of
RSS and most of a second of start-up, for code an in-cluster operator never runs.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_REFRESH_SECONDS = 60.0  # client-go re-reads a token file at most once a minute


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
    import yaml  # here, not at the top: an in-cluster process reads no kubeconfig (~15 ms of its start)

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
