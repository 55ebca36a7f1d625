"""Total-GPU mode through DRA on the real apiserver (resource.k8s.io/v1, served by default in v1.34): a job stating
`spec.gpus` with `spec.gpuDeviceClassName` is laid out from the devices of that class the nodes' ResourceSlices
publish, stored with the Worker template claiming them from ResourceClaimTemplate `<job>-gpus`, which the operator
makes (owned by the job) before any pod. The Nodes have no extended resource (a DRA node's GPUs are in its slices),
and no kubelet or DRA driver runs: the test publishes the slices itself, as a driver would."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest

from mpiop.api.raw import JSON
from mpiop.kube.client import RESOURCE_CLAIM_TEMPLATES, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.policies.gpu_layout import AT_ADMISSION
from testkit.gpupool import WHOLE_GPUS, dra_gpu_pool, laid_out, total_gpus_job
from testkit.layout_webhook import serving_layout_webhook
from testkit.operator import Cluster, Operator, eventually

pytestmark = pytest.mark.integration
NVIDIA = "gpu.nvidia.com"  # the driver; the class is the test's own, selecting its whole GPUs as NVIDIA's does


@pytest.fixture
async def dra_pool(kube: KubeClient) -> AsyncIterator[tuple[str, str]]:
    """Four nodes of 8 whole GPUs and 7 MIG devices in ResourceSlices, and a DeviceClass of NVIDIA's whole-GPU form;
    yields (pool, class)."""
    klass = f"gpu-{uuid.uuid4().hex[:6]}.example.com"
    async with dra_gpu_pool(kube, klass, WHOLE_GPUS) as pool:
        yield pool, klass


async def template_of(cluster: Cluster, name: str) -> JSON | None:
    return await cluster.kube.get_or_none(RESOURCE_CLAIM_TEMPLATES, cluster.ns, f"{name}-gpus")


def check_stored(job: JSON, template: JSON, klass: str) -> None:
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    print("\nthe stored job's Worker:", json.dumps({"replicas": worker["replicas"],
                                                     "slotsPerWorker": job["spec"]["slotsPerWorker"],
                                                     "template.spec": worker["template"]["spec"]}, indent=1))
    print(f"{GPU_LAYOUT_ANNOTATION}: {job['metadata']['annotations'][GPU_LAYOUT_ANNOTATION]}")
    shown = {k: v for k, v in template["metadata"].items() if k in ("name", "ownerReferences")}
    print("ResourceClaimTemplate:", json.dumps({"metadata": shown, "spec": template["spec"]}, indent=1))
    spec = worker["template"]["spec"]
    assert (worker["replicas"], job["spec"]["slotsPerWorker"]) == (4, 8)
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": f"{job['metadata']['name']}-gpus"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]
    assert "limits" not in spec["containers"][0]["resources"]
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpus", "exactly": {"deviceClassName": klass, "allocationMode": "ExactCount", "count": 8}}]
    owner = template["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("MPIJob", job["metadata"]["uid"], True)


async def test_32_gpus_of_a_device_class_on_four_8_device_nodes_are_4_workers_claiming_8(
        cluster: Cluster, operator: Operator, dra_pool: tuple[str, str]) -> None:
    pool, klass = dra_pool
    await cluster.create_job(total_gpus_job("dra", pool, 32, device_class=klass))
    job = await eventually(lambda: laid_out(cluster, "dra"), what="dra laid out")
    assert job["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION] == (
        f"32 {klass} devices as 4 workers x 8 GPUs (slotsPerWorker 8), on nodes: 4 nodes with 8 {klass} devices")
    template = await eventually(lambda: template_of(cluster, "dra"), what="dra-gpus")
    check_stored(job, template, klass)

    async def workers() -> dict[str, JSON] | None:
        pods = await cluster.pods()
        return pods if {f"dra-worker-{i}" for i in range(4)} <= set(pods) else None

    pods = await eventually(workers, what="dra's workers")
    assert pods["dra-worker-0"]["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "dra-gpus"}]


async def test_with_the_webhook_the_job_is_stored_laid_out_and_its_template_follows(
        cluster: Cluster, operator: Operator, kube: KubeClient, dra_pool: tuple[str, str]) -> None:
    pool, klass = dra_pool
    async with serving_layout_webhook(operator, kube, cluster.ns, total_gpus_job("probe", pool, 16, klass)):
        created = await cluster.create_job(total_gpus_job("dra", pool, 32, device_class=klass))
        assert created["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION].endswith(AT_ADMISSION)  # stored laid out
        template = await eventually(lambda: template_of(cluster, "dra"), what="dra-gpus")
        check_stored(created, template, klass)
