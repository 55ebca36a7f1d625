"""Total-GPU mode through DRA (spec.gpus with spec.gpuDeviceClassName): the ResourceClaimTemplate a laid-out job's
workers claim their GPUs from.

The layout (policies/gpu_layout) writes into the Worker template a per-pod claim CLAIM made from template
`<job>-gpus` and gives the first container that claim; the template itself cannot be written then (at admission
the job has no uid to own it), so it is a supporting object of the job, made before any pod: one request CLAIM of
exactly `gpus / Worker.replicas` devices of the job's class. A job whose claim names another template (laid out by
its user) gets none.
"""

from __future__ import annotations

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob

RESOURCE_API_VERSION = "resource.k8s.io/v1"
CLAIM = "gpus"  # the claim, and its one request, in the Worker template and the template


def template_name(job: MPIJob) -> str:
    return template_name_for(job.metadata.name)


def template_name_for(job_name: str) -> str:
    return f"{job_name}-gpus"


def worker_claim(job: MPIJob) -> JSON | None:
    """The Worker template's resourceClaims entry CLAIM, if any."""
    worker = job.spec.worker
    claims = ((worker.template.get("spec") or {}).get("resourceClaims") or []) if worker is not None else []
    return next((c for c in claims if isinstance(c, dict) and c.get("name") == CLAIM), None)


def claim_template(job: MPIJob) -> JSON | None:
    """The template the job's workers claim their GPUs from, when mpiop laid the job out through DRA (else None)."""
    claim = worker_claim(job)
    if (job.spec.gpus is None or job.spec.gpu_device_class_name is None or claim is None
            or claim.get("resourceClaimTemplateName") != template_name(job) or job.spec.worker_replicas <= 0):
        return None
    per_worker = job.spec.gpus // job.spec.worker_replicas
    exactly = {"deviceClassName": job.spec.gpu_device_class_name, "allocationMode": "ExactCount", "count": per_worker}
    return {"apiVersion": RESOURCE_API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": names.owned_metadata(job, template_name(job)),
            "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}}}
