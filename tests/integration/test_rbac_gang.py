"""deploy/overlays/scheduler-plugins' RBAC: the podgroups rule grants exactly what a gang-scheduled job's life uses.

As test_rbac.py does for deploy/base: the overlay's ServiceAccount and ClusterRole(+Binding) are applied, the
operator runs on a token of that ServiceAccount alone with `--gang-scheduling`, and one job lives through
creation (PodGroup created), a resize (patched), success (deleted). Every podgroups request is granted, and
every podgroups verb granted was used.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devcluster import gang_crds
from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.desired.podgroup import GangScheduler
from mpiop.desired.settings import Settings
from mpiop.kube.client import MPIJOBS, KubeClient
from testkit.deploy import DEPLOY
from testkit.gangs import PODGROUP_VERBS, podgroup_requests_check
from testkit.namespaces import create_namespace, delete_namespace
from testkit.operator import Cluster, eventually, mpijob
from testkit.rbac import Request, applied, recorder, service_account_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
async def overlay_rbac(control_plane: ControlPlane) -> AsyncIterator[list[JSON]]:
    with applied(control_plane, DEPLOY / "overlays" / "scheduler-plugins", KINDS) as objects:
        yield objects


async def gang_life(control_plane: ControlPlane, kube: KubeClient, tmp: Path) -> list[Request]:
    await service_account_kubeconfig(control_plane, kube, tmp / "kubeconfig")
    namespace = await create_namespace(kube, f"t-rbac-gang-{uuid.uuid4().hex[:6]}")
    requests: list[Request] = []
    client = await KubeClient.connect(str(tmp / "kubeconfig"), qps=0, burst=100, on_request=recorder(requests))
    try:
        cluster = Cluster(kube, namespace)
        manager = Manager(client, ManagerConfig(namespace=namespace, workers=2, settings=Settings(
            gang_scheduler=GangScheduler(gang_crds.DEFAULT_SCHEDULER_NAME))))
        await manager.preflight()
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop))
        try:
            await asyncio.wait_for(manager.synced.wait(), 30)
            await cluster.create_job(mpijob("life", workers=1))
            await eventually(lambda: cluster.pod("life-worker-0"), what="the worker")
            await kube.patch(MPIJOBS, namespace, "life", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}})
            await eventually(lambda: cluster.pod("life-worker-1"), what="the second worker")
            await cluster.run_all(["life-worker-0", "life-worker-1", "life-launcher"])
            await eventually(lambda: cluster.condition("life", "Running"), what="Running")
            await cluster.set_phase("life-launcher", "Succeeded")
            await eventually(lambda: cluster.condition("life", "Succeeded"), what="Succeeded")

            async def pod_group_deleted() -> bool:
                return any(r[0] == "delete" and r[2] == "podgroups" for r in requests)

            await eventually(pod_group_deleted, what="the PodGroup deleted")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
        return list(requests)
    finally:
        await client.close()
        await delete_namespace(kube, namespace)


async def test_podgroups_rule_is_exactly_what_a_gang_job_uses(
        control_plane: ControlPlane, kube: KubeClient, mpijob_crd: None, overlay_rbac: list[JSON],
        tmp_path: Path) -> None:
    from devcluster.install import install_custom_resource
    from mpiop.controller.caches import pod_group_resource

    plugins = GangScheduler(gang_crds.DEFAULT_SCHEDULER_NAME)
    await install_custom_resource(kube, gang_crds.scheduler_plugins_crd(), pod_group_resource(plugins))
    requests = await gang_life(control_plane, kube, tmp_path)
    assert podgroup_requests_check(requests, overlay_rbac, "scheduling.x-k8s.io") == PODGROUP_VERBS
