"""How many MPI slots each worker offers: slotsPerWorker, else the worker's GPU limit, else 1.

With runLauncherAsWorker and no Worker, the launcher is the only host: its GPU limit gives the default.
"""

from __future__ import annotations

from typing import Any

from mpiop.api.v2beta1 import MPIJob

# Well-known GPU resources first; any other vendor's `<domain>/gpu` extended resource after them.
_PREFERRED_GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def _gpu_limit(container: dict[str, Any]) -> int | None:
    resources = container.get("resources") or {}
    limits: dict[str, Any] = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    names = [n for n in _PREFERRED_GPU_RESOURCES if n in limits]
    names += sorted(n for n in limits if n.endswith("/gpu") and n not in _PREFERRED_GPU_RESOURCES)
    for name in names:
        try:
            value = int(str(limits[name]))
        except ValueError:
            continue
        if value > 0:
            return value
    return None


def gpus_per_pod(template: dict[str, Any]) -> int | None:
    """GPUs the first container with a GPU limit asks for (extended resources are whole numbers)."""
    for container in (template.get("spec") or {}).get("containers") or []:
        if (gpus := _gpu_limit(container)) is not None:
            return gpus
    return None


def slots_per_worker(job: MPIJob) -> int:
    if job.spec.slots_per_worker is not None:
        return job.spec.slots_per_worker
    worker = job.spec.worker
    if worker is not None and (gpus := gpus_per_pod(worker.template)) is not None:
        return gpus
    launcher = job.spec.launcher
    if job.spec.run_launcher_as_worker and job.spec.worker_replicas == 0 and launcher is not None and (
        gpus := gpus_per_pod(launcher.template)
    ) is not None:
        return gpus
    return 1
