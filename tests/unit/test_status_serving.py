"""mpiop.status_serving: what the jobs' pods are told to trust when the status endpoint's CA is renewed."""

from __future__ import annotations

import dataclasses

from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.desired import status_report
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import KubeClient
from mpiop.status_serving import trust
from testkit.mpijobs import make_mpijob

URL = "https://mpiop-status.mpiop-system.svc:8443"


def test_trust_reaches_the_settings_every_reconcile_decides_by() -> None:
    """Renewing the CA gives the pods the next one beside the current one: the next pass of each job writes the pair
    into its ConfigMap (the reconciler's settings), and a restarted manager would too (the config's)."""
    settings = dataclasses.replace(DEFAULT_SETTINGS, status_endpoint=status_report.StatusEndpoint(URL, "OLD\n"),
                                   cluster_domain="cluster.local")
    manager = Manager(KubeClient(ClusterAccess("http://127.0.0.1:1")), ManagerConfig(namespace="ns", settings=settings))
    trust(manager, URL, "OLD\nNEW\n")
    for held in (manager.reconciler.settings, manager.config.settings):
        assert held.status_endpoint == status_report.StatusEndpoint(URL, "OLD\nNEW\n")
        assert held.cluster_domain == "cluster.local"  # the rest as it was
    job = MPIJob.model_validate(make_mpijob("pi", "ns").json())
    assert status_report.config_map_data(job, manager.reconciler.settings.status_endpoint) == {
        status_report.CA_KEY: "OLD\nNEW\n"}
