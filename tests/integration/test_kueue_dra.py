"""DRA jobs under Kueue's own controller (devcluster/versions.py's KUEUE_VERSION, devcluster/kueue.py, started once
for this module and test_kueue.py: tests/integration/conftest.py's `kueue`). Kueue's DRA support (its
KueueDRAIntegration gate, on by default since v0.18; its Configuration maps DeviceClass gpu.nvidia.com to the
quota resource DRA_GPU_RESOURCE) counts the devices a pod set's
ResourceClaimTemplates ask for, for an MPIJob as for any integration: 2 workers of 8 are 16 of quota.

A job stating its total GPUs through DRA (`spec.gpus` with `spec.gpuDeviceClassName`) is laid out at admission by
mpiop's webhook, its workers claiming from ResourceClaimTemplate `<job>-gpus`, which mpiop makes (owned by the job)
on its first pass: when Kueue first builds the job's Workload, that template may not exist yet. The second test
shows Kueue waits for it and admits the job in quota of its devices, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from devcluster.kueue import DRA_DEVICE_CLASS, DRA_GPU_RESOURCE, Kueue
from mpiop.api.raw import JSON
from mpiop.kube.client import RESOURCE_CLAIM_TEMPLATES, KubeClient
from testkit.dra import claim_template, device_class_made, exactly, request
from testkit.gpupool import WHOLE_GPUS, dra_gpu_pool, total_gpus_job
from testkit.kueue import (
    QUEUE,
    QUEUE_NAME_LABEL,
    admitted,
    condition,
    cq_usage,
    job_webhooks,
    kueue_events,
    kueue_queue,
    workload_of,
)
from testkit.mpijobs import make_mpijob
from testkit.operator import Cluster, Operator, eventually
from testkit.pods import env_of

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kueue")]  # one Kueue: on one xdist worker


@pytest.fixture
async def nvidia_class(kube: KubeClient) -> AsyncIterator[str]:
    async with device_class_made(kube, DRA_DEVICE_CLASS) as name:
        yield name


def dra_job(name: str) -> JSON:
    """2 workers, each claiming 8 GPUs through ResourceClaimTemplate eight-gpus, in QUEUE (suspended)."""
    return (make_mpijob(name).workers(2).claim("gpus", "eight-gpus").label(QUEUE_NAME_LABEL, QUEUE).suspend()
            .manifest())


def claims(workload: JSON) -> dict[str, tuple[int, list[JSON]]]:
    """Each pod set's (count, its template's resourceClaims)."""
    return {p["name"]: (p["count"], p["template"]["spec"].get("resourceClaims") or [])
            for p in workload["spec"]["podSets"]}


async def admitted_with_16_devices(kube: KubeClient, namespace: str, job: str, template: str) -> None:
    """Wait for the job's Workload admitted: its worker pod set claims from `template`, 2 x 8 devices are 16 of the
    quota, the launcher uses none; printed."""
    async def admitted_workload() -> JSON | None:
        workload = await workload_of(kube, namespace, "MPIJob", job)
        return workload if workload is not None and admitted(workload) else None

    workload = await eventually(admitted_workload, timeout=90, what=f"{job}'s Workload admitted")
    assignments = {a["name"]: a for a in workload["status"]["admission"]["podSetAssignments"]}
    print(f"\nWorkload {workload['metadata']['name']} podSets (count, resourceClaims): {claims(workload)}")
    print("podSetAssignments resourceUsage: "
          f"{ {n: (a['count'], a.get('resourceUsage')) for n, a in assignments.items()} }")
    assert claims(workload) == {"launcher": (1, []), "worker": (2, [
        {"name": "gpus", "resourceClaimTemplateName": template}])}
    assert assignments["worker"]["resourceUsage"] == {DRA_GPU_RESOURCE: "16"}
    assert not assignments["launcher"].get("resourceUsage")


async def test_a_dra_job_is_admitted_in_quota_of_its_claimed_devices_and_one_more_waits(
        cluster: Cluster, operator: Operator, kube: KubeClient, kueue: Kueue, nvidia_class: str) -> None:
    async with kueue_queue(kube, cluster.ns, {DRA_GPU_RESOURCE: "16"}):
        await kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns,
                          claim_template("eight-gpus", request("gpus", exactly(nvidia_class, 8))))
        await cluster.create_job(dra_job("dra"))

        await admitted_with_16_devices(kube, cluster.ns, "dra", "eight-gpus")

        async def used() -> dict[str, dict[str, str]] | None:
            usage = await cq_usage(kube, cluster.ns)
            return usage if usage["flavorsUsage"].get(DRA_GPU_RESOURCE) == "16" else None

        usage = await eventually(used, what=f"the ClusterQueue using 16 {DRA_GPU_RESOURCE}")
        print(f"ClusterQueue {usage}")
        assert usage["flavorsReservation"] == {DRA_GPU_RESOURCE: "16"}

        async def pods() -> dict[str, JSON] | None:
            found = await cluster.pods()
            return found if {"dra-launcher", "dra-worker-0", "dra-worker-1"} <= set(found) else None

        made = await eventually(pods, what="dra's pods")
        job = await cluster.job("dra")
        assert job is not None and job["spec"]["runPolicy"]["suspend"] is False
        print(f"dra-worker-1 resourceClaims: {made['dra-worker-1']['spec']['resourceClaims']}")
        assert made["dra-worker-1"]["spec"]["resourceClaims"] == [
            {"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
        assert env_of(made["dra-worker-1"])["LOCAL_WORLD_SIZE"] == "8"

        # Another 16 GPUs do not fit beside it: Kueue counts them in the mapped resource.
        await cluster.create_job(dra_job("more"))

        async def pending() -> JSON | None:
            workload = await workload_of(kube, cluster.ns, "MPIJob", "more")
            reserved = None if workload is None else condition(workload, "QuotaReserved")
            return reserved if reserved is not None and reserved["reason"] == "Pending" else None

        reserved = await eventually(pending, timeout=60, what="more's Workload pending")
        print(f"more: QuotaReserved={reserved['status']} {reserved['reason']}: {reserved['message']}")
        assert f"insufficient unused quota for {DRA_GPU_RESOURCE} in flavor {cluster.ns}-flavor, 16 more needed" \
            in reserved["message"]
        await operator.settle()
        assert not [p for p in await cluster.pods() if p.startswith("more-")]


def in_queue(job: JSON) -> JSON:
    job["metadata"].setdefault("labels", {})[QUEUE_NAME_LABEL] = QUEUE
    return job


async def test_a_total_gpu_job_through_dra_is_admitted_once_its_claim_template_is_made(
        cluster: Cluster, operator: Operator, kube: KubeClient, kueue: Kueue) -> None:
    async with dra_gpu_pool(kube, DRA_DEVICE_CLASS, WHOLE_GPUS) as pool, \
            job_webhooks(operator, kube, cluster.ns, in_queue(total_gpus_job("probe", pool, 16, DRA_DEVICE_CLASS))), \
            kueue_queue(kube, cluster.ns, {DRA_GPU_RESOURCE: "16"}):
        created = await cluster.create_job(in_queue(total_gpus_job("total", pool, 16, DRA_DEVICE_CLASS)))
        worker = created["spec"]["mpiReplicaSpecs"]["Worker"]
        template_then = await kube.get_or_none(RESOURCE_CLAIM_TEMPLATES, cluster.ns, "total-gpus")
        print(f"\nthe create's answer: suspend={created['spec']['runPolicy']['suspend']}, Worker replicas "
              f"{worker['replicas']}, resourceClaims {worker['template']['spec']['resourceClaims']}; "
              f"ResourceClaimTemplate total-gpus then: {'made' if template_then else 'not yet'}")
        assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook
        assert (worker["replicas"], worker["template"]["spec"]["resourceClaims"]) == (  # mpiop's
            2, [{"name": "gpus", "resourceClaimTemplateName": "total-gpus"}])

        await admitted_with_16_devices(kube, cluster.ns, "total", "total-gpus")
        template = await kube.get(RESOURCE_CLAIM_TEMPLATES, cluster.ns, "total-gpus")
        assert template["spec"]["spec"]["devices"]["requests"] == [{"name": "gpus", "exactly": {
            "deviceClassName": DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 8}}]

        async def pods() -> dict[str, JSON] | None:
            found = await cluster.pods()
            return found if {"total-launcher", "total-worker-0", "total-worker-1"} <= set(found) else None

        made = await eventually(pods, what="total's pods")
        assert env_of(made["total-worker-1"])["LOCAL_WORLD_SIZE"] == "8"
        await operator.settle()
        said = await kueue_events(kube, cluster.ns, "total")
        print("Kueue's Events on the job: " + "; ".join(said))
        assert not [e for e in said if e.startswith(("Stopped", "DeletedWorkload"))], said
        assert sum(e.startswith("CreatedWorkload") for e in said) == 1, said
