"""Fixtures for tests that run the operator against the real control plane."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from devcluster.install import install_crd
from devcluster.kueue import Kueue
from devcluster.simulated import SimulatedCluster
from mpiop.kube.client import KubeClient
from testkit import summary
from testkit.operator import Cluster, Operator, running_operator

LAST = ("test_kueue.py", "test_kueue_dra.py")
"""Modules run after the rest of the suite: the Kueue manager they start runs until the session ends (`kueue` is a
session fixture, and watches MPIJobs), so no other test shares the apiserver with it."""


OLDEST_MINOR = ("test_crd.py", "test_crd_defaults.py", "test_crd_roundtrip.py", "test_deploy.py", "test_rbac.py",
                "test_exec_launch_rbac.py", "test_exec_websocket_authz.py", "test_dra_slots.py", "test_gpu_layout.py")
"""Modules marked `oldest_minor`: what a cluster of the oldest supported Kubernetes minor must take from mpiop (the
CRD and its CEL rules, the kustomize and Helm installs, RBAC both ways, the exec Role, DRA v1 slots, the layout
webhook, a WebSocket exec's two verbs). `make test` runs them again with MPIOP_KUBERNETES_VERSION=oldest
(tests/conftest.py)."""
NOT_ON_OLDEST = frozenset({
    # The committed PodTemplateSpec schema is the pinned apiserver's by definition (`make podtemplate-schema`).
    "test_podtemplate_snapshot_is_what_the_apiserver_serves",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in OLDEST_MINOR and item.name not in NOT_ON_OLDEST:
            item.add_marker(pytest.mark.oldest_minor)
    items.sort(key=lambda item: item.path.name in LAST)  # stable: the order within each part stays


@pytest.fixture
async def cluster(kube: KubeClient, namespace: str, mpijob_crd: str) -> Cluster:
    return Cluster(kube, namespace)


@pytest.fixture(scope="session")
def kueue(control_plane: ControlPlane, mpijob_crd: str) -> Iterator[Kueue]:
    """Kueue's manager, started once for the modules that use it (run last); its MPIJob integration starts only
    once the MPIJob CRD is served."""
    with Kueue(control_plane) as running:
        yield running


@pytest.fixture
async def sim_kube(simulated: SimulatedCluster) -> AsyncIterator[KubeClient]:
    """A client of the module's own `simulated` cluster (each simulated module defines one), with the CRD."""
    client = await KubeClient.connect(str(simulated.kubeconfig), qps=0, burst=100)
    await install_crd(client)
    yield client
    await client.close()


@pytest.fixture
async def operator(control_plane: ControlPlane, cluster: Cluster, request: pytest.FixtureRequest
                   ) -> AsyncIterator[Operator]:
    """mpiop running in-process, watching only this test's namespace; an apiserver Warning to it fails the test,
    unless the test is marked `templates_warned` (its jobs' own templates hold what the apiserver warns of)."""
    warned = request.node.get_closest_marker("templates_warned") is not None
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, allow_api_warnings=warned) as running:
        yield running


def _cached_tool(script: str) -> str:
    """A tool hack/<script> puts into .cache/ on first use (built from its Go module: minutes); its path."""
    result = subprocess.run(["bash", str(Path(__file__).resolve().parents[2] / "hack" / script)],
                            capture_output=True, text=True, timeout=1800, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def helm() -> str:
    """helm, from helm.sh/helm/v3/cmd/helm (hack/helm.sh)."""
    return _cached_tool("helm.sh")


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool, from Debian's prometheus package like the server test_prometheus runs (hack/promtool.sh)."""
    return _cached_tool("promtool.sh")


@pytest.fixture(scope="session")
def prometheus() -> str:
    """The Prometheus server, from Debian's prometheus package (hack/prometheus.sh)."""
    return _cached_tool("prometheus.sh")


@pytest.fixture
def prometheus_report(request: pytest.FixtureRequest) -> list[str]:
    """Lines test_prometheus.py reports: shown in the session's summary, as the control plane's are."""
    return summary.lines(request.config, "a real Prometheus on mpiop")
