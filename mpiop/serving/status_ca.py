"""The status endpoint's CA, kept in a Secret of the operator's own namespace (`--status-ca-secret`).

Every job's ConfigMap carries the CA its pods verify the endpoint with (desired/status_report). With a CA per
process, a restart or a leader handover rewrote every job's ConfigMap (1,000 PATCHes at 1,000 jobs) and, until
then, the pods' posts failed verification against the new leader. One CA in a Secret, read by every replica at
start, keeps the ConfigMaps as they are. The first process to start makes it; one that finds it unreadable, or
within RENEW_BEFORE of its end, replaces it (optimistically: a replica that lost the race reads the winner's).
"""

from __future__ import annotations

import base64
import datetime as dt
import urllib.parse
from dataclasses import dataclass
from typing import Literal

import structlog

from mpiop.api.raw import JSON
from mpiop.certs import CA, Certificates
from mpiop.kube.client import SECRETS, ApiError, KubeClient

log = structlog.get_logger(__name__)

SECRET = "mpiop-status-ca"  # --status-ca-secret's default, once (deploy/base/deployment.yaml passes it too)
CERT_KEY, KEY_KEY = "tls.crt", "tls.key"  # a kubernetes.io/tls Secret's keys
RENEW_BEFORE = dt.timedelta(days=60)
ATTEMPTS = 5

Outcome = Literal["loaded", "created", "renewed"]


class CASecretError(RuntimeError):
    """The CA's Secret could not be read or written (an answer other than a refusal: the message says which)."""


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def endpoint_hosts(status_url: str) -> list[str]:
    """The names the serving certificate is for: the host of --status-url, its Service's shorter names, loopback."""
    host = urllib.parse.urlsplit(status_url).hostname
    if not status_url.startswith("https://") or not host:
        raise ValueError(f"--status-url must be https://host[:port], not {status_url!r}")
    hosts = [host, *(h for h in ("localhost", "127.0.0.1") if h != host)]
    if host.endswith(".svc"):  # the Service's other names
        hosts += [host.split(".")[0], ".".join(host.split(".")[:2]), f"{host}.cluster.local"]
    return hosts


def parse_secret_ref(value: str, own_namespace: str) -> SecretRef | None:
    """`[NAMESPACE/]NAME` as --status-ca-secret takes it; None when it is '' or names no namespace and the process
    has none of its own (outside a cluster): then the process makes its own CA. ValueError on a malformed value."""
    if not value:
        return None
    namespace, _, name = value.rpartition("/")
    if not name or "/" in namespace:
        raise ValueError(f"--status-ca-secret must be [NAMESPACE/]NAME, not {value!r}")
    namespace = namespace or own_namespace
    return SecretRef(namespace, name) if namespace else None


def secret_body(ref: SecretRef, ca: CA, resource_version: str | None = None,
                secret_type: str = "kubernetes.io/tls") -> JSON:
    """The Secret holding `ca`; replacing one (`resource_version`), its type stays (the apiserver refuses a change)."""
    metadata: JSON = {"name": ref.name, "namespace": ref.namespace,
                      "labels": {"app.kubernetes.io/name": "mpiop", "app.kubernetes.io/component": "status-ca"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Secret", "type": secret_type, "metadata": metadata,
            "data": {CERT_KEY: base64.b64encode(ca.cert_pem.encode()).decode(),
                     KEY_KEY: base64.b64encode(ca.key_pem).decode()}}


def read_secret(secret: JSON) -> CA:
    """The CA a Secret holds; ValueError naming the key that is missing or wrong."""
    data = secret.get("data") or {}
    try:
        cert, key = (base64.b64decode(data[k], validate=True) for k in (CERT_KEY, KEY_KEY))
    except KeyError as missing:
        raise ValueError(f"no data[{missing.args[0]!r}]") from None
    except ValueError as error:
        raise ValueError(f"data[{CERT_KEY!r}] or data[{KEY_KEY!r}] is not base64: {error}") from None
    try:
        return CA.from_pem(cert, key)
    except ValueError as error:
        raise ValueError(f"data[{CERT_KEY!r}], data[{KEY_KEY!r}]: {error}") from None


async def shared_ca(client: KubeClient, ref: SecretRef, now: dt.datetime) -> tuple[CA, Outcome]:
    """The CA in Secret `ref`, made or replaced there first if need be: (the CA, what was done)."""
    for _ in range(ATTEMPTS):
        secret = await client.get_or_none(SECRETS, ref.namespace, ref.name)
        if secret is None:
            ca = CA.generate(now)
            try:
                await client.create(SECRETS, ref.namespace, secret_body(ref, ca))
            except ApiError as error:
                if error.conflict:  # another replica made it first: read theirs
                    continue
                raise
            return ca, "created"
        try:
            found = read_secret(secret)
        except ValueError as error:
            log.warning("the status endpoint's CA Secret is unreadable: replacing it", secret=str(ref),
                        error=str(error))
        else:
            if found.valid_for(now) > RENEW_BEFORE:
                return found, "loaded"
        ca = CA.generate(now)
        try:
            await client.replace(SECRETS, ref.namespace, ref.name,
                                 secret_body(ref, ca, secret.get("metadata", {}).get("resourceVersion"),
                                             secret.get("type") or "Opaque"))
        except ApiError as error:
            if error.conflict:  # another replica replaced it first
                continue
            raise
        return ca, "renewed"
    raise CASecretError(f"status endpoint CA Secret {ref}: it changed under each of {ATTEMPTS} attempts to read it")


async def certificates(client: KubeClient, hosts: list[str], ref: SecretRef | None, now: dt.datetime) -> Certificates:
    """The serving certificate for `hosts`, signed by the CA in `ref` (or, when None, by a CA of this process's)."""
    if ref is None:
        log.info("status endpoint CA: this process's own (outside a cluster, --status-ca-secret names no namespace): "
                 "a restart rewrites the CA in every job's ConfigMap")
        return Certificates(hosts, now)
    try:
        ca, outcome = await shared_ca(client, ref, now)
    except ApiError as error:
        if error.forbidden:  # e.g. the image upgraded before the RBAC: serve on, as before the Secret
            log.error("status endpoint CA: the Secret is refused, so this process serves under a CA of its own and a "
                      "restart rewrites the CA in every job's ConfigMap; its ServiceAccount needs secrets create, "
                      "and get and update on the Secret (deploy/base/rbac.yaml, Role mpiop-status-endpoint)",
                      secret=str(ref), error=str(error)[:300])
            return Certificates(hosts, now)
        raise CASecretError(f"status endpoint CA Secret {ref}: {error}") from None
    log.info(f"status endpoint CA {outcome}", secret=str(ref), not_after=ca.cert.not_valid_after_utc.isoformat())
    return Certificates(hosts, now, ca)


SWITCH_AFTER = dt.timedelta(hours=1)


@dataclass
class Renewal:
    """The CA renewed before it ends, with no moment at which a job's pods do not trust the endpoint. Checked hourly
    by the leader: within RENEW_BEFORE of the served CA's end, `shared_ca` makes the next one in the Secret (or
    reads the one another process made); it is given to the jobs' pods beside the current one (`trusted`, written
    into each job's ConfigMap by the next resync, and into the GPU layout webhook's caBundle), and served
    SWITCH_AFTER later. A standby that takes over catches up the same way. Before, the CA was renewed only when a
    process started: one running for a year served under an expired CA."""

    certificates: Certificates
    ref: SecretRef | None  # None: a CA of this process's own, renewed here alike
    next_ca: CA | None = None
    given: dt.datetime | None = None

    @property
    def serving(self) -> CA:
        assert self.certificates.ca is not None  # set by Certificates.__post_init__
        return self.certificates.ca

    def trusted(self) -> str:
        """The CA the pods must trust: the served one, and the next one once it is known."""
        return self.serving.cert_pem + (self.next_ca.cert_pem if self.next_ca is not None else "")

    async def check(self, client: KubeClient, now: dt.datetime) -> bool:
        """Whether `trusted()` changed. An error reading or writing the Secret is logged: the next check tries again."""
        try:
            if self.ref is not None:
                latest, _ = await shared_ca(client, self.ref, now)
            elif self.serving.valid_for(now) <= RENEW_BEFORE:
                latest = self.next_ca or CA.generate(now)
            else:
                latest = self.serving
        except (ApiError, OSError, CASecretError) as error:
            log.warning("status endpoint CA: could not check its Secret; trying again within the hour",
                        secret=str(self.ref), error=str(error)[:300])
            return False
        if latest.cert == self.serving.cert:
            return False
        if self.next_ca is None or latest.cert != self.next_ca.cert:
            self.next_ca, self.given = latest, now
            log.info("status endpoint CA: the next one is given to the jobs' pods beside the current one",
                     secret=str(self.ref), serving_until=self.serving.cert.not_valid_after_utc.isoformat(),
                     switch_after=SWITCH_AFTER.total_seconds())
            return True
        if self.given is not None and now - self.given < SWITCH_AFTER:
            return False
        self.certificates.ca, self.certificates.ca_pem = latest, latest.cert_pem
        self.certificates.issue(now)
        self.next_ca = self.given = None
        log.info("status endpoint CA renewed: serving under the next one", secret=str(self.ref),
                 not_after=latest.cert.not_valid_after_utc.isoformat())
        return True
