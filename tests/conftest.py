"""Fixtures shared by all tests: a real control plane (started once, on first use) and per-test namespaces."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from devcluster.controlplane import ControlPlane
from devcluster.versions import KUBERNETES_VERSION, OLDEST_KUBERNETES_VERSION
from mpiop.kube.client import KubeClient
from testkit import summary
from testkit.namespaces import create_namespace, delete_namespace

# In CI nothing is built or downloaded under a test's timeout: `make test-binaries` made every binary the suite runs,
# and one missing makes devcluster (and hack/) fail at once, naming it and that target (devcluster/binaries.py).
# Kueue's manager is the exception: the session waits for the build .ci/run started in the background.
if os.environ.get("CI", "").lower() not in ("", "0", "false"):
    os.environ.setdefault("MPIOP_NO_BUILD", "1")

# `kill <pytest>` should tear the control plane down like Ctrl-C does (fixtures' finalizers run);
# a SIGKILL is covered by the components' parent-death signal.
signal.signal(signal.SIGTERM, signal.default_int_handler)

def kubernetes_version() -> str:
    """The session control plane's Kubernetes: the project's, or with MPIOP_KUBERNETES_VERSION=oldest the oldest
    supported minor's (`make test` runs the tests marked `oldest_minor` again so), or the version it names."""
    wanted = os.environ.get("MPIOP_KUBERNETES_VERSION", "")
    return {"": KUBERNETES_VERSION, "oldest": OLDEST_KUBERNETES_VERSION}.get(wanted, wanted)


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager on loopback, for the whole session (each xdist worker's
    own); the terminal summary says which etcd and apiserver, and the apiserver's flags."""
    with ControlPlane(scheduler=False, kubernetes_version=kubernetes_version()) as plane:
        ran_on = plane.describe()
        summary.lines(pytestconfig, "control plane").extend([
            f"{ran_on.get('etcd')}; {ran_on.get('kube-apiserver')}",
            f"apiserver flags: {' '.join(ran_on['apiserver_flags'])}"])
        yield plane


def pytest_sessionfinish(session: pytest.Session) -> None:
    summary.hand_over(session.config)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, on its controller
def pytest_testnodedown(node: Any, error: object) -> None:
    summary.take_over(node.config, node)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    summary.write(terminalreporter)


@pytest.fixture(scope="session")
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(control_plane.kubeconfig), qps=0, burst=1000)
    yield client
    await client.close()


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh namespace, ready for Pods (its default ServiceAccount exists), deleted afterwards."""
    name = await create_namespace(kube, f"t-{uuid.uuid4().hex[:10]}")
    yield name
    await delete_namespace(kube, name)


@pytest.fixture(scope="session")
async def mpijob_crd(kube: KubeClient) -> str:
    """The MPIJob CRD, installed (or updated to this checkout's version) once per session; its name."""
    from devcluster.install import install_crd
    from mpiop.api.crd import CRD_NAME

    await install_crd(kube)
    return CRD_NAME
