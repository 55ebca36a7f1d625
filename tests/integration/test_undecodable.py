"""One MPIJob nesting 1,030 levels deep (past orjson's 1,024) stops nobody: it is skipped and reported.

mpiop's own CRD preserves no unknown field any more, so the apiserver prunes such a field; an older or
foreign CRD (helm never upgrades CRDs) still preserves one under the Worker template's metadata. The
`loose_crd` fixture puts that back for one test and restores this checkout's CRD afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from devcluster.install import install_crd
from mpiop.api.crd import CRD_NAME
from mpiop.api.raw import JSON
from mpiop.kube.client import CRDS, EVENTS, MPIJOBS, ApiError, KubeClient
from mpiop.kube.codec import encode
from testkit.operator import Cluster, Operator, eventually, mpijob
from testkit.process import OperatorProcess

LEVELS = 1030
_METADATA = ("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/mpiReplicaSpecs/properties/Worker"
             "/properties/template/properties/metadata")


@pytest.fixture
async def loose_crd(kube: KubeClient, mpijob_crd: str) -> AsyncIterator[None]:
    """The CRD as kubeflow-era schemas had it: unknown fields under the Worker template's metadata preserved."""
    await kube.request("PATCH", CRDS.path(None, CRD_NAME), content_type="application/json-patch+json", body=[
        {"op": "add", "path": f"{_METADATA}/x-kubernetes-preserve-unknown-fields", "value": True}])
    try:
        yield
    finally:
        await install_crd(kube)


def poison_body(name: str) -> bytes:
    """An MPIJob whose Worker template metadata carries {"x": {"x": ...}} 1,030 levels deep (orjson cannot
    encode it either, so the deep part is written by hand)."""
    manifest = mpijob(name, workers=1)
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {"x": "DEEP"}
    return encode(manifest).replace(b'"DEEP"', b'{"x":' * LEVELS + b"1" + b"}" * LEVELS)


async def create_poison(kube: KubeClient, namespace: str, name: str) -> None:
    """Create it, retrying until the apiserver serves the loosened schema (a pruned copy is deleted)."""
    async def created() -> bool:
        await kube.request("POST", MPIJOBS.path(namespace), body=poison_body(name))
        raw = await kube.request_raw("GET", MPIJOBS.path(namespace, name))
        if raw.count(b'{"x":') >= LEVELS:
            return True
        await kube.delete(MPIJOBS, namespace, name)
        await eventually(lambda: _gone(kube, namespace, name), what=f"pruned {name} deleted")
        return False

    await eventually(created, timeout=60, what="the apiserver to keep the 1,030-level field")


async def _gone(kube: KubeClient, namespace: str, name: str) -> bool:
    try:
        await kube.request_raw("GET", MPIJOBS.path(namespace, name))
    except ApiError as error:
        return error.not_found
    return False


async def undecodable_event(kube: KubeClient, namespace: str, name: str) -> JSON | None:
    listed = await kube.list(EVENTS, namespace, fieldSelector=f"involvedObject.name={name}")
    return next((e for e in listed["items"] if e["reason"] == "Undecodable"), None)


async def test_started_with_the_poison_job_present(control_plane: ControlPlane, cluster: Cluster, loose_crd: None,
                                                   tmp_path: Path) -> None:
    await create_poison(cluster.kube, cluster.ns, "poison")
    await cluster.create_job(mpijob("before", workers=1))
    op = OperatorProcess.in_namespace(str(control_plane.kubeconfig), cluster.ns, "mpiop-poison", tmp_path)
    try:
        await eventually(op.ready, timeout=60, what="/readyz: the caches synced despite the poison job")
        await eventually(lambda: cluster.condition("before", "Created"), what="the other job reconciled")
        event = await eventually(lambda: undecodable_event(cluster.kube, cluster.ns, "poison"),
                                 what="a Warning Event on the poison job")
        assert event["type"] == "Warning" and "depth" in event["message"], event["message"]
        await cluster.create_job(mpijob("after", workers=1))
        await eventually(lambda: cluster.condition("after", "Created"), what="a job created later reconciled")
        metrics = await op.metrics()
        assert metrics.value("mpiop_undecodable_objects_total", kind="MPIJob") == 1
        assert (await op.http(op.health_port, "/healthz"))[0] == 200
        assert (await op.http(op.health_port, "/readyz"))[0] == 200
        skipped = [line for line in op.log_lines() if "object cannot be decoded" in line]
        assert len(skipped) == 1 and f"{cluster.ns}/poison" in skipped[0], skipped
        events = [line for line in op.log_lines() if '"event": "event"' in line and "Undecodable" in line]
        assert events and f'"job": "{cluster.ns}/poison"' in events[0], "every Event is a log line with the job key"
        print(f"\n{skipped[0][:400]}\n{events[0][:400]}")
        assert await cluster.condition("poison", "Created") is None, "the poison job is not acted upon"
        assert op.stop() == 0
    finally:
        op.kill()


async def test_the_poison_job_appears_after_start_and_is_taken_up_once_fixed(
        cluster: Cluster, loose_crd: None, operator: Operator) -> None:
    await cluster.create_job(mpijob("first", workers=1))
    await eventually(lambda: cluster.condition("first", "Created"), what="first Created")
    await create_poison(cluster.kube, cluster.ns, "poison")
    await eventually(lambda: undecodable_event(cluster.kube, cluster.ns, "poison"), what="Undecodable Event")
    jobs = operator.manager.caches.mpijobs
    assert f"{cluster.ns}/poison" in jobs.undecodable() and jobs.get(f"{cluster.ns}/poison") is None
    await cluster.create_job(mpijob("second", workers=1))
    await eventually(lambda: cluster.condition("second", "Created"), what="a job created after the poison one")

    # Its owner removes the deep field: the job is decodable again and reconciled like any other.
    await cluster.kube.patch(MPIJOBS, cluster.ns, "poison",
                             {"spec": {"mpiReplicaSpecs": {"Worker": {"template": {"metadata": {"x": None}}}}}})
    await eventually(lambda: cluster.condition("poison", "Created"), what="the fixed job reconciled")
    assert not jobs.undecodable()
    assert operator.manager.supervisor.healthz() is None
