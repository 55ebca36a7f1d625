"""mpiop's own serving certificate for its status endpoint: no cert-manager needed.

At start the process makes a CA (a year) and a serving certificate it signs (SERVING_DAYS, for the endpoint's
DNS names); `Certificates.rotate_if_due` makes a new serving certificate from the same CA when two thirds of the
old one's life have passed, and the TLS context loads it for new connections. The CA reaches the job's pods in
their ConfigMap (desired/status_report); a new process makes a new CA, which the next reconcile of each job
writes there, and the kubelet refreshes in the pods' volume.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 365
SERVING_DAYS = 30


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _names(hosts: list[str]) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = []
    for host in hosts:
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            found.append(x509.DNSName(host))
    return found


@dataclass
class Certificates:
    """The CA and the current serving certificate (PEM), and the TLS context that serves it."""

    hosts: list[str]
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    ca_pem: str = ""
    serving_pem: str = ""
    not_after: dt.datetime = field(init=False)
    context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpiop status endpoint CA")])
        self._ca = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                    .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(self.now - dt.timedelta(minutes=5))
                    .not_valid_after(self.now + dt.timedelta(days=CA_DAYS))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                 key_encipherment=False, data_encipherment=False, key_agreement=False,
                                                 key_cert_sign=True, crl_sign=True, encipher_only=False,
                                                 decipher_only=False), critical=True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()),
                                   critical=False)
                    .sign(self._ca_key, hashes.SHA256()))
        self.ca_pem = _pem(self._ca)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.issue(self.now)

    def issue(self, now: dt.datetime) -> None:
        """A new serving certificate for `hosts`, loaded into the context (existing connections keep theirs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        self.not_after = now + dt.timedelta(days=SERVING_DAYS)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.hosts[0])]))
                .issuer_name(self._ca.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(self.not_after)
                .add_extension(x509.SubjectAlternativeName(_names(self.hosts)), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                # Strict verification (Python 3.13's default context: VERIFY_X509_STRICT) refuses a certificate
                # without the key identifiers that link it to its CA.
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                               critical=False)
                .sign(self._ca_key, hashes.SHA256()))
        self.serving_pem = _pem(cert)
        with tempfile.TemporaryDirectory() as scratch:  # ssl loads chains from files only
            cert_file, key_file = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert_file.write_text(self.serving_pem)
            key_file.write_bytes(_key_pem(key))
            key_file.chmod(0o600)
            self.context.load_cert_chain(cert_file, key_file)

    def rotate_if_due(self, now: dt.datetime) -> bool:
        """Issue a new serving certificate once two thirds of the current one's life have passed."""
        if now < self.not_after - dt.timedelta(days=SERVING_DAYS / 3):
            return False
        self.issue(now)
        return True
