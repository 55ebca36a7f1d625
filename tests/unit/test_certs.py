"""mpiop.certs: the status endpoint's CA (its own or one read back from PEM) and serving certificate, renewed from the
same CA when due."""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import Callable

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from mpiop.certs import CA, CA_DAYS, SERVING_DAYS, Certificates

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_the_serving_certificate_is_signed_by_the_ca_for_its_hosts() -> None:
    certs = Certificates(["mpiop-status.mpiop-system.svc", "127.0.0.1"], now=dt.datetime.now(dt.UTC))
    serving = x509.load_pem_x509_certificate(certs.serving_pem.encode())
    ca = x509.load_pem_x509_certificate(certs.ca_pem.encode())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["mpiop-status.mpiop-system.svc"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    client = ssl.create_default_context(cadata=certs.ca_pem)  # what the pods' clients trust it by
    assert client.verify_mode == ssl.CERT_REQUIRED


def test_renewed_at_two_thirds_of_its_life_from_the_same_ca() -> None:
    certs = Certificates(["h"], now=T0)
    first, ca = certs.serving_pem, certs.ca_pem
    assert certs.rotate_if_due(T0 + dt.timedelta(days=SERVING_DAYS * 2 / 3 - 1)) is False
    assert certs.serving_pem == first
    assert certs.rotate_if_due(T0 + dt.timedelta(days=SERVING_DAYS * 2 / 3)) is True
    assert certs.serving_pem != first and certs.ca_pem == ca
    renewed = x509.load_pem_x509_certificate(certs.serving_pem.encode())
    renewed.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.encode()))


def test_a_strict_client_accepts_the_serving_certificate() -> None:
    """Python 3.13's default client context verifies strictly (VERIFY_X509_STRICT), as trixie's image's python
    does: a serving certificate without key identifiers fails there with 'Missing Authority Key Identifier'.
    The handshake runs in memory (two BIO pairs), server and client as the endpoint and a pod have them."""
    certs = Certificates(["127.0.0.1"], now=dt.datetime.now(dt.UTC))
    client_context = ssl.create_default_context(cadata=certs.ca_pem)
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = certs.context.wrap_bio(to_server, from_server, server_side=True)
    client = client_context.wrap_bio(to_client, from_client, server_hostname="127.0.0.1")
    done = {"server": False, "client": False}
    for _ in range(10):
        for side, tls in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    tls.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        to_server.write(from_client.read())
        to_client.write(from_server.read())
        if all(done.values()):
            break
    assert all(done.values()), done
    assert client.getpeercert() is not None


def test_a_ca_given_signs_the_serving_certificate_and_bounds_its_life() -> None:
    """A CA from the shared Secret (serving/status_ca) signs; a serving certificate never outlives it."""
    ca = CA.generate(T0)
    certs = Certificates(["h"], now=T0 + dt.timedelta(days=CA_DAYS - 10), ca=ca)
    assert certs.ca_pem == ca.cert_pem
    serving = x509.load_pem_x509_certificate(certs.serving_pem.encode())
    serving.verify_directly_issued_by(ca.cert)
    assert serving.not_valid_after_utc == ca.cert.not_valid_after_utc == certs.not_after


def test_a_ca_read_back_from_pem_is_the_same_ca() -> None:
    ca = CA.generate(T0)
    again = CA.from_pem(ca.cert_pem.encode(), ca.key_pem)
    assert again.cert == ca.cert and again.key_pem == ca.key_pem
    assert again.valid_for(T0) == dt.timedelta(days=CA_DAYS)


@pytest.mark.parametrize(("cert", "key", "says"), [
    (lambda a, b: a.cert_pem.encode(), lambda a, b: b.key_pem, "the key is not the certificate's"),
    (lambda a, b: b"not a certificate", lambda a, b: a.key_pem, "not a PEM certificate"),
    (lambda a, b: a.cert_pem.encode(), lambda a, b: b"not a key", "not an unencrypted PEM key"),
    (lambda a, b: _leaf(a).encode(), lambda a, b: a.key_pem, "not a CA"),
], ids=["another key", "garbage certificate", "garbage key", "a leaf, not a CA"])
def test_a_ca_that_is_not_one_is_refused_saying_why(cert: Callable[[CA, CA], bytes], key: Callable[[CA, CA], bytes],
                                                   says: str) -> None:
    one, other = CA.generate(T0), CA.generate(T0)
    with pytest.raises(ValueError, match=says):
        CA.from_pem(cert(one, other), key(one, other))


def _leaf(ca: CA) -> str:
    """A serving certificate whose key is `ca`'s own (so only its BasicConstraints tell it from a CA)."""
    return (x509.CertificateBuilder().subject_name(ca.cert.subject).issuer_name(ca.cert.subject)
            .public_key(ca.key.public_key()).serial_number(1).not_valid_before(T0)
            .not_valid_after(T0 + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode())
