"""A pool of GPU Nodes of a test's own, and jobs of total GPUs (`spec.gpus`) that may run only there.

The nodes are plain Node objects (no kubelet runs them) carrying a label of the pool's own, which the jobs
select, so the session's other nodes never count in a layout. The apiserver's TaintNodesByCondition plugin
taints a new Node not-ready, and no kubelet ever makes it Ready: the jobs tolerate node.kubernetes.io/not-ready
and unreachable (as a pod may), and nothing else.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

from mpiop.api.raw import JSON
from mpiop.kube.client import DEVICE_CLASSES, NODES, RESOURCE_SLICES, ApiError, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from testkit.dra import NVIDIA, device_class, resource_slice
from testkit.mpijobs import make_mpijob
from testkit.nodes import gpu_node
from testkit.operator import Cluster

POOL_LABEL = "test.mpiop.dev/gpu-pool"
NOT_READY_TOLERATIONS = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                         {"key": "node.kubernetes.io/unreachable", "operator": "Exists"}]


@contextlib.asynccontextmanager
async def gpu_pool(kube: KubeClient, nodes: Callable[[str, dict[str, str]], list[JSON]]) -> AsyncIterator[str]:
    """The Nodes `nodes(pool name, the pool's labels)` returns, created for the block and deleted after it;
    yields the pool's name (a prefix for the nodes' names, unique per pool)."""
    name = f"p{uuid.uuid4().hex[:6]}"
    made = nodes(name, {POOL_LABEL: name})
    for node in made:
        await kube.create(NODES, None, node)
    try:
        yield name
    finally:
        for node in made:
            with contextlib.suppress(ApiError):
                await kube.delete(NODES, None, node["metadata"]["name"])


def total_gpus_job(name: str, pool: str, gpus: int, device_class: str | None = None, **run_policy: object) -> JSON:
    """`gpus` in all (devices of `device_class`: through DRA), laid out by mpiop on the pool's nodes."""
    return (make_mpijob(name).total_gpus(gpus, device_class=device_class).run_policy(**run_policy)
            .pod_spec("Worker", nodeSelector={POOL_LABEL: pool}, tolerations=NOT_READY_TOLERATIONS).manifest())


async def laid_out(cluster: Cluster, name: str) -> JSON | None:
    """The job, once mpiop wrote its layout (the annotation recording it)."""
    job = await cluster.job(name)
    return job if job is not None and GPU_LAYOUT_ANNOTATION in (job["metadata"].get("annotations") or {}) else None


def worker_gpu_limit(job: JSON) -> str:
    return str(job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
               ["nvidia.com/gpu"])


# NVIDIA's whole-GPU DeviceClass selector, as its driver's chart installs it (the MIG devices have type mig)
WHOLE_GPUS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


@contextlib.asynccontextmanager
async def dra_gpu_pool(kube: KubeClient, klass: str, selector: str) -> AsyncIterator[str]:
    """Four nodes with no extended resource (a DRA node's GPUs are in its slices), each publishing 8 whole GPUs
    and 7 MIG devices (driver gpu.nvidia.com, attribute type gpu or mig) in ResourceSlices, and DeviceClass
    `klass` selecting with CEL `selector` (made, and deleted at the end, only if missing: another module's may be
    there); yields the pool."""
    def nodes(name: str, labels: dict[str, str]) -> list[JSON]:
        made = [gpu_node(f"{name}-{i}", 0, labels=labels) for i in range(4)]
        for node in made:
            for part in ("capacity", "allocatable"):
                node["status"][part].pop("nvidia.com/gpu")
        return made

    made_class = True
    try:
        await kube.create(DEVICE_CLASSES, None, {**device_class(klass),
                                                 "spec": {"selectors": [{"cel": {"expression": selector}}]}})
    except ApiError as error:
        if not error.conflict:
            raise
        made_class = False  # another module's: it deletes it
    slices: list[JSON] = []
    try:
        async with gpu_pool(kube, nodes) as pool:
            for i in range(4):
                for device_type, count in (("gpu", 8), ("mig", 7)):
                    piece = resource_slice(f"{pool}-{i}", NVIDIA, count, device_type)
                    piece["metadata"]["name"] += f"-{device_type}"
                    piece["spec"]["pool"]["name"] += f"-{device_type}"
                    slices.append(await kube.create(RESOURCE_SLICES, None, piece))
            yield pool
    finally:
        for piece in slices:
            with contextlib.suppress(ApiError):
                await kube.delete(RESOURCE_SLICES, None, piece["metadata"]["name"])
        if made_class:
            with contextlib.suppress(ApiError):
                await kube.delete(DEVICE_CLASSES, None, klass)
