"""kubeflow's CRD defaults on the real apiserver: a new MPIJob is stored with them, and one stored before the CRD
had them (an upgrade from an older mpiop) reads with them filled in, unchanged in etcd, deciding the same."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator

import pytest
import yaml

from devcluster.controlplane import ControlPlane
from devcluster.install import install_crd
from mpiop.api.crd import CRD_NAME, crd
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.kube.client import CRDS, MPIJOBS, KubeClient
from mpiop.plan import Observed
from testkit.kubeflow import crd_defaults, with_crd_defaults
from testkit.mpijobs import make_mpijob
from testkit.operator import eventually

SPEC = "/spec/versions/0/schema/openAPIV3Schema/properties/spec"
DEFAULTED = {
    "launcherCreationPolicy": "AtStartup", "mpiImplementation": "OpenMPI", "runLauncherAsWorker": False,
    "sshAuthMountPath": "/root/.ssh",
}


@pytest.fixture
async def crd_without_defaults(kube: KubeClient, mpijob_crd: str) -> AsyncIterator[None]:
    """The CRD as mpiop generated it before it had kubeflow's defaults; this checkout's CRD again afterwards."""
    removals = [{"op": "remove", "path": f"{SPEC}/properties/{field}/default"} for field in DEFAULTED]
    removals.append({"op": "remove", "path": f"{SPEC}/properties/runPolicy/properties/suspend/default"})
    await kube.request("PATCH", CRDS.path(None, CRD_NAME), content_type="application/json-patch+json", body=removals)
    try:
        yield
    finally:
        await install_crd(kube)


def minimal(name: str, namespace: str) -> JSON:
    return make_mpijob(name, namespace).manifest()


async def test_a_new_job_is_stored_with_kubeflows_defaults(control_plane: ControlPlane, kube: KubeClient,
                                                           mpijob_crd: str, namespace: str) -> None:
    manifest = minimal("pi", namespace)
    await kube.create(MPIJOBS, namespace, manifest)
    shown = await asyncio.to_thread(control_plane.kubectl, "get", "mpijob", "pi", "-n", namespace, "-o", "yaml")
    print(shown)
    spec = yaml.safe_load(shown)["spec"]
    assert {field: spec.get(field) for field in DEFAULTED} == DEFAULTED
    assert spec["runPolicy"]["suspend"] is False
    assert "slotsPerWorker" not in spec  # unset: the GPU limit, else 1 (docs/api.md)
    assert spec == with_crd_defaults(crd(), manifest)["spec"]


async def test_a_job_stored_without_defaults_reads_with_them_and_decides_the_same(
        kube: KubeClient, namespace: str, crd_without_defaults: None) -> None:
    manifest = minimal("old", namespace)

    async def stored_undefaulted() -> JSON | None:
        # The apiserver serves the patched schema a moment after the PATCH: until then a create is defaulted.
        created = await kube.create(MPIJOBS, namespace, manifest)
        if "mpiImplementation" not in created["spec"]:
            return created
        await kube.delete(MPIJOBS, namespace, "old")
        await eventually(lambda: gone(kube, namespace, "old"), what="the defaulted copy deleted")
        return None

    before = await eventually(stored_undefaulted, timeout=60, what="a job stored without the defaults")
    assert not set(DEFAULTED) & set(before["spec"]) and "suspend" not in before["spec"]["runPolicy"]

    await install_crd(kube)

    async def read_defaulted() -> JSON | None:
        now = await kube.get(MPIJOBS, namespace, "old")
        return now if "mpiImplementation" in now["spec"] else None

    after = await eventually(read_defaulted, timeout=60, what="the stored job read with the CRD's defaults")
    assert after["spec"] == with_crd_defaults(crd(), before)["spec"]
    assert set(crd_defaults(crd())) == {f"spec.{f}" for f in DEFAULTED} | {"spec.runPolicy.suspend"}
    # Defaulted as it is read, not rewritten: etcd still holds the object as it was created.
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    now = dt.datetime.now(dt.UTC)
    old_job, read_job = MPIJob.model_validate(before), MPIJob.model_validate(after)
    assert decide(old_job, Observed(), now) == decide(read_job, Observed(), now)


async def gone(kube: KubeClient, namespace: str, name: str) -> bool:
    return await kube.get_or_none(MPIJOBS, namespace, name) is None
