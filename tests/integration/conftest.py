"""Fixtures for tests that run the operator against the real control plane."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.kube.client import KubeClient
from tests.integration.operator import Cluster, Operator, running_operator


@pytest.fixture
async def cluster(kube: KubeClient, namespace: str, mpijob_crd: str) -> Cluster:
    return Cluster(kube, namespace)


@pytest.fixture
async def operator(control_plane: ControlPlane, cluster: Cluster) -> AsyncIterator[Operator]:
    """mpiop running in-process, watching only this test's namespace."""
    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as running:
        yield running
