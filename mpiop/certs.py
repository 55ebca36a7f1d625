"""mpiop's own serving certificate for its status endpoint: no cert-manager needed.

A CA (a year) signs a serving certificate (SERVING_DAYS, for the endpoint's DNS names); `Certificates.rotate_if_due`
makes a new serving certificate from the same CA when two thirds of the old one's life have passed, and the TLS
context loads it for new connections. The CA reaches the job's pods in their ConfigMap (desired/status_report), so
every replica and every restart must serve under the same one: serving/status_ca keeps it in a Secret. A process
with nowhere to keep it makes its own (`CA.generate`), which the next reconcile of each job writes there.
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
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 365
SERVING_DAYS = 30


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _spki(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _names(hosts: list[str]) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = []
    for host in hosts:
        try:
            found.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            found.append(x509.DNSName(host))
    return found


@dataclass(frozen=True)
class CA:
    """A self-signed CA that may sign serving certificates (path length 0), and its key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, now: dt.datetime) -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mpiop status endpoint CA")])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             key_cert_sign=True, crl_sign=True, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cls(cert, key)

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> CA:
        """The CA of a PEM certificate and its PEM (PKCS#8, unencrypted) EC key; ValueError saying what is wrong."""
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError as error:
            raise ValueError(f"the certificate is not a PEM certificate: {error}") from None
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as error:  # TypeError: encrypted
            raise ValueError(f"the key is not an unencrypted PEM key: {error}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"the key is {type(key).__name__}, not an EC private key")
        if _spki(key.public_key()) != _spki(cert.public_key()):
            raise ValueError("the key is not the certificate's")
        try:
            if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
                raise ValueError("the certificate is not a CA (BasicConstraints ca=false)")
        except x509.ExtensionNotFound:
            raise ValueError("the certificate is not a CA (no BasicConstraints)") from None
        return cls(cert, key)

    @property
    def cert_pem(self) -> str:
        return _pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def valid_for(self, now: dt.datetime) -> dt.timedelta:
        """How long from `now` it can still sign (negative once expired)."""
        return self.cert.not_valid_after_utc - now


@dataclass
class Certificates:
    """The CA and the current serving certificate (PEM), and the TLS context that serves it."""

    hosts: list[str]
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    ca: CA | None = None  # None: a CA of this process's own
    ca_pem: str = ""
    serving_pem: str = ""
    not_after: dt.datetime = field(init=False)
    context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        if self.ca is None:
            self.ca = CA.generate(self.now)
        self.ca_pem = self.ca.cert_pem
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.issue(self.now)

    def issue(self, now: dt.datetime) -> None:
        """A new serving certificate for `hosts`, loaded into the context (existing connections keep theirs)."""
        assert self.ca is not None  # set by __post_init__
        key = ec.generate_private_key(ec.SECP256R1())
        # Never past the CA's own end: a chain with an expired CA fails however young its leaf.
        self.not_after = min(now + dt.timedelta(days=SERVING_DAYS), self.ca.cert.not_valid_after_utc)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.hosts[0])]))
                .issuer_name(self.ca.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(self.not_after)
                .add_extension(x509.SubjectAlternativeName(_names(self.hosts)), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                # Strict verification (Python 3.13's default context: VERIFY_X509_STRICT) refuses a certificate
                # without the key identifiers that link it to its CA.
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca.key.public_key()),
                               critical=False)
                .sign(self.ca.key, hashes.SHA256()))
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
