"""mpiop.certs: the status endpoint's CA and serving certificate, renewed from the same CA when due."""

from __future__ import annotations

import datetime as dt
import ssl

from cryptography import x509

from mpiop.certs import SERVING_DAYS, Certificates

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
