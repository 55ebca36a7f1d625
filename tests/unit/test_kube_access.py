"""How KubeClient finds and authenticates to the apiserver without kubernetes_asyncio, and list metadata."""

from __future__ import annotations

import base64
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.certs import CertificateAuthority
from mpiop.kube import access as kube_access
from mpiop.kube.access import ConfigError, load_incluster, load_kubeconfig
from mpiop.kube.codec import decode, list_metadata


def kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None,
               context: str = "dev") -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def test_client_certificates_and_ca_files_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    admin = ca.issue("admin", common_name="admin")
    path = kubeconfig(tmp_path / "config", {"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
                      {"server": "https://127.0.0.1:6443/", "certificate-authority": "pki/ca.crt",
                       "tls-server-name": "kubernetes"})
    access = load_kubeconfig(path)
    assert access is not None
    assert access.server == "https://127.0.0.1:6443"
    assert access.tls_server_name == "kubernetes"
    assert isinstance(access.ssl_context, ssl.SSLContext)
    assert access.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert len(access.ssl_context.get_ca_certs()) == 1
    assert await access.authorization() is None
    assert admin.cert.is_file()


async def test_inline_certificate_data_and_a_static_token(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "pki")
    admin = ca.issue("admin", common_name="admin")

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    path = kubeconfig(tmp_path / "config",
                      {"client-certificate-data": b64(admin.cert), "client-key-data": b64(admin.key), "token": "t0k"},
                      {"server": "https://h:1", "certificate-authority-data": b64(ca.pair.cert)})
    access = load_kubeconfig(path)
    assert access is not None and access.ssl_context is not None
    assert len(access.ssl_context.get_ca_certs()) == 1
    assert await access.authorization() == "Bearer t0k"


async def test_a_token_file_is_read_again_after_a_minute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("first\n")
    path = kubeconfig(tmp_path / "config", {"tokenFile": "token"},
                      {"server": "https://h:1", "insecure-skip-tls-verify": True})
    access = load_kubeconfig(path)
    assert access is not None and access.ssl_context is not None
    assert access.ssl_context.verify_mode == ssl.CERT_NONE
    assert await access.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second\n")
    assert await access.authorization() == "Bearer first"  # cached
    monkeypatch.setattr(kube_access, "TOKEN_FILE_REFRESH_SECONDS", 0.0)
    assert await access.authorization() == "Bearer second"


async def test_basic_auth_and_plain_http(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", {"username": "a", "password": "b"}, {"server": "http://h:8080"})
    access = load_kubeconfig(path)
    assert access is not None
    assert access.ssl_context is None
    assert await access.authorization() == "Basic YTpi"


def test_exec_plugins_and_auth_providers_are_left_to_kubernetes_asyncio(tmp_path: Path) -> None:
    for user in ({"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
                 {"auth-provider": {"name": "oidc"}}):
        assert load_kubeconfig(kubeconfig(tmp_path / "config", user)) is None


def test_a_missing_context_or_server_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no context named 'nope'"):
        load_kubeconfig(kubeconfig(tmp_path / "config", {"token": "x"}), context="nope")
    with pytest.raises(ConfigError, match="has no server"):
        load_kubeconfig(kubeconfig(tmp_path / "config", {"token": "x"}, {"insecure-skip-tls-verify": True}))


def test_importing_the_client_does_not_import_kubernetes_asyncio() -> None:
    """~40 MB of RSS and most of a second of start-up that an in-cluster operator does not need."""
    import subprocess

    code = "import mpiop.kube.client, mpiop.controller.manager, sys; print('kubernetes_asyncio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


async def test_in_cluster_uses_the_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = CertificateAuthority(tmp_path)
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    access = load_incluster(tmp_path)
    assert access.server == "https://[fd00::1]:443"
    assert await access.authorization() == "Bearer sa-token"
    assert ca.pair.cert.is_file()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(ConfigError, match="not in a cluster"):
        load_incluster(tmp_path)


def test_list_metadata_is_read_without_decoding_the_items() -> None:
    typed = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"abc"},' \
            b'"items":[{"metadata":{"name":"p","labels":{"items":"x"}}}]}'
    unstructured = b'{"apiVersion":"kubeflow.org/v2beta1","items":[{"metadata":{"name":"j"}}],' \
                   b'"kind":"MPIJobList","metadata":{"continue":"","resourceVersion":"9"}}'
    assert list_metadata(typed) == {"resourceVersion": "7", "continue": "abc"}
    assert list_metadata(unstructured) == {"continue": "", "resourceVersion": "9"}
    assert list_metadata(b'{"kind":"Status"}') is None
    assert decode(typed)["items"][0]["metadata"]["name"] == "p"


def _split(body: bytes, chunk: int) -> tuple[list[Any], Any]:
    from mpiop.kube.codec import ListSplitter

    items: list[Any] = []
    splitter = ListSplitter(items.append)
    for i in range(0, len(body), chunk):
        splitter.feed(body[i:i + chunk])
    return items, splitter.close()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_a_streamed_list_is_cut_into_exactly_its_items(chunk: int) -> None:
    import orjson

    # Items with nested look-alikes of an item's opening (lists of objects with metadata, a string).
    pods = [{"metadata": {"name": f"p{i}", "labels": {"a": "},{\"metadata\":{"}},
             "spec": {"templates": [{"metadata": {"name": "t1"}}, {"metadata": {"name": "t2"}}]},
             "status": {"phase": "Running"}} for i in range(5)]
    typed = orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"},
                          "items": pods})
    assert _split(typed, chunk) == (pods, {"resourceVersion": "42"})

    jobs = [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": f"j{i}"},
             "spec": {"owners": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {}}]}}
            for i in range(3)]
    unstructured = orjson.dumps({"apiVersion": "kubeflow.org/v2beta1", "items": jobs, "kind": "MPIJobList",
                                 "metadata": {"continue": "", "resourceVersion": "7"}})
    assert _split(unstructured, chunk) == (jobs, {"continue": "", "resourceVersion": "7"})

    empty = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[]}'
    assert _split(empty, chunk) == ([], {"resourceVersion": "3"})
