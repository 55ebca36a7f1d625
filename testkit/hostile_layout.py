"""The costliest total-GPU job (spec.gpus) a tenant can write for mpiop's layout, and the nodes that make it cost.

The layout checks each GPU node's NoSchedule taints against the Worker template's tolerations, one by one
(policies/gpu_layout.why_not_eligible). A template with `count` tolerations that tolerate nothing but the last
(the usual GPU taint's) makes every node of `tainted_gpu_nodes` cost two full scans: its GPU taint found at the
end, then its reserved taint not found at all. A total no node size divides (13 on 8-GPU nodes) never fits, so
the job stays to be laid out and every node change lays it out again. Shared by `python -m bench.hostile` and
any test of the layout's bounds.
"""

from __future__ import annotations

import uuid

from mpiop.api.raw import JSON
from testkit.mpijobs import make_mpijob
from testkit.nodes import gpu_nodes, taint

GPU_TAINT = taint("nvidia.com/gpu", "present")
RESERVED_TAINT = taint("test.mpiop.dev/reserved", "tenant-b")
TOUCH_LABEL = "test.mpiop.dev/touched"


def tainted_gpu_nodes(prefix: str, count: int, gpus: int = 8) -> list[JSON]:
    """Plain GPU Nodes (no kubelet) with the GPU taint and a reserved one: none can take the hostile job."""
    return gpu_nodes(prefix, count, gpus, taints=[GPU_TAINT, RESERVED_TAINT])


def tolerations(count: int) -> list[JSON]:
    """`count` tolerations (at least 1): `count - 1` of keys no node has (the shortest the schema takes, so the
    most fit in a request), then the GPU taint's."""
    return [{"key": f"t{i}"} for i in range(count - 1)] + [{"key": GPU_TAINT["key"], "operator": "Exists"}]


def hostile_job(name: str, namespace: str, count: int, gpus: int = 13) -> JSON:
    """A job of `gpus` in all (spec.gpus) whose Worker template carries `tolerations(count)`."""
    job = make_mpijob(name, namespace).total_gpus(gpus).pod_spec("Worker", tolerations=tolerations(count)).manifest()
    job["metadata"]["namespace"] = namespace
    return job


def admission_review(job: JSON) -> JSON:
    """The AdmissionReview (admission.k8s.io/v1) the apiserver sends a mutating webhook when `job` is created."""
    meta = job.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": meta.get("namespace", ""),
                        "name": meta.get("name", ""),
                        "kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
                        "resource": {"group": "kubeflow.org", "version": "v2beta1", "resource": "mpijobs"},
                        "object": job}}
