"""The status endpoint's CA renewed while the process runs (status_ca.Renewal), against the real apiserver's Secret:
before, a CA was renewed only when a process started, so a leader running for a year served under an expired CA and
every job's pods refused it."""

from __future__ import annotations

import base64
import datetime as dt

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from mpiop.certs import CA_DAYS, Certificates
from mpiop.kube.client import SECRETS
from mpiop.serving.status_ca import CERT_KEY, RENEW_BEFORE, SWITCH_AFTER, Renewal, SecretRef, certificates
from testkit.operator import Cluster

NOW = dt.datetime.now(dt.UTC)
LATE = NOW + dt.timedelta(days=CA_DAYS) - RENEW_BEFORE + dt.timedelta(days=1)


def _signed_by(served: Certificates, ca_pem: str) -> bool:
    serving = x509.load_pem_x509_certificate(served.serving_pem.encode())
    issuer = x509.load_pem_x509_certificate(ca_pem.encode())
    try:
        serving.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


async def test_the_ca_is_renewed_before_its_end_and_served_once_the_pods_were_given_it(cluster: Cluster) -> None:
    ref = SecretRef(cluster.ns, "mpiop-status-ca")
    served = await certificates(cluster.kube, ["localhost"], ref, NOW)
    first = served.ca_pem
    renewal = Renewal(served, ref)
    assert not await renewal.check(cluster.kube, NOW + dt.timedelta(days=30))
    assert renewal.trusted() == first

    # Within RENEW_BEFORE of its end: the next CA is made in the Secret and given to the pods beside the current one,
    # which is still served.
    assert await renewal.check(cluster.kube, LATE)
    secret = await cluster.kube.get(SECRETS, cluster.ns, ref.name)
    following = base64.b64decode(secret["data"][CERT_KEY]).decode()
    assert following != first
    assert renewal.trusted() == first + following
    assert served.ca_pem == first and _signed_by(served, first)
    assert not await renewal.check(cluster.kube, LATE + SWITCH_AFTER / 2)

    # SWITCH_AFTER later (the jobs' ConfigMaps rewritten by then): served under the next CA, which alone is trusted.
    assert await renewal.check(cluster.kube, LATE + SWITCH_AFTER)
    assert served.ca_pem == following and _signed_by(served, following) and not _signed_by(served, first)
    assert renewal.trusted() == following
    assert not await renewal.check(cluster.kube, LATE + 2 * SWITCH_AFTER)

    # A standby started before the renewal takes over: it catches up the same way, giving before serving.
    standby = Renewal(await certificates(cluster.kube, ["localhost"], None, NOW), ref)
    assert await standby.check(cluster.kube, LATE + 3 * SWITCH_AFTER)
    assert standby.trusted().endswith(following) and not _signed_by(standby.certificates, following)
