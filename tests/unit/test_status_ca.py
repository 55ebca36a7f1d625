"""serving/status_ca's pure parts: where --status-ca-secret points, the names the certificate is for, and a Secret
read back, or refused naming the key that is wrong. Against the real apiserver: tests/integration/test_status_ca.py."""

from __future__ import annotations

import base64
import datetime as dt
import re

import pytest

from mpiop.certs import CA
from mpiop.serving.status_ca import (
    CERT_KEY,
    KEY_KEY,
    SecretRef,
    endpoint_hosts,
    parse_secret_ref,
    read_secret,
    secret_body,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(("value", "own", "expected"), [
    ("mpiop-status-ca", "mpiop-system", SecretRef("mpiop-system", "mpiop-status-ca")),
    ("ops/ca", "mpiop-system", SecretRef("ops", "ca")),
    ("ops/ca", "", SecretRef("ops", "ca")),
    ("mpiop-status-ca", "", None),  # outside a cluster: a CA of the process's own
    ("", "mpiop-system", None),  # turned off
])
def test_where_the_secret_is(value: str, own: str, expected: SecretRef | None) -> None:
    assert parse_secret_ref(value, own) == expected


@pytest.mark.parametrize("value", ["a/b/c", "ops/"])
def test_a_malformed_secret_reference_names_the_flag(value: str) -> None:
    with pytest.raises(ValueError, match="--status-ca-secret must be"):
        parse_secret_ref(value, "mpiop-system")


def test_the_certificate_names_the_service_by_all_its_names_and_loopback() -> None:
    assert endpoint_hosts("https://mpiop-status.mpiop-system.svc:8443") == [
        "mpiop-status.mpiop-system.svc", "localhost", "127.0.0.1", "mpiop-status", "mpiop-status.mpiop-system",
        "mpiop-status.mpiop-system.svc.cluster.local"]
    assert endpoint_hosts("https://10.0.0.1:9443") == ["10.0.0.1", "localhost", "127.0.0.1"]
    with pytest.raises(ValueError, match="--status-url must be https://"):
        endpoint_hosts("http://mpiop-status:8443")


def test_a_secret_written_reads_back_as_the_same_ca() -> None:
    ca = CA.generate(T0)
    body = secret_body(SecretRef("mpiop-system", "mpiop-status-ca"), ca, resource_version="7")
    assert body["type"] == "kubernetes.io/tls" and body["metadata"]["resourceVersion"] == "7"
    assert read_secret(body).cert == ca.cert


def _data(**data: str) -> dict[str, object]:
    return {"data": data}


@pytest.mark.parametrize(("secret", "says"), [
    ({}, re.escape("no data['tls.crt']")),
    (_data(**{CERT_KEY: "Zm9v"}), re.escape("no data['tls.key']")),
    (_data(**{CERT_KEY: "!!", KEY_KEY: "Zm9v"}), "is not base64"),
    (_data(**{CERT_KEY: base64.b64encode(b"x").decode(), KEY_KEY: "Zm9v"}),
     "data\\['tls.crt'\\], data\\['tls.key'\\]: the certificate is not a PEM certificate"),
], ids=["empty", "no key", "not base64", "not PEM"])
def test_an_unreadable_secret_is_refused_naming_the_key(secret: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        read_secret(secret)
