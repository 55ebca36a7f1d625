"""The cache filler of `python -m bench.hostile` (`--attacks caches`): issue 60's tenant filling the leader's caches.

In a namespace of its own with no MPIJob, `--filler-config-maps` ConfigMaps of `--filler-kb` KiB of small keys
(kubeflow's operator-name label, as mpiop's own objects carry), made 8 at a time, in three kinds: owned by nothing
(the issue's: on 3cc6b1b, 20 of 700 KB grew the leader from 74 to 208 MB), controlled by an MPIJob that does not
exist under a name no job makes, and controlled by one under the name of a hostfile ConfigMap (`<job>-config`:
cached, but without a key mpiop does not write). They stay through the window's end, when the leader's RSS after it
is read, and until the simulated cluster goes.

`--attacks templates`: `--filler-claim-templates` small ResourceClaimTemplates (one request of 8 devices, ~400
bytes each) in a namespace of their own, 32 at a time, that no MPIJob names. Watched whenever `--gpu-device-classes`
is set (the default): on k137 the informer kept every one of them (trimmed); now only those a cached job names
(kube/wanted.py).
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from bench.harness import fresh_namespace
from bench.report import log
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.kube.client import CONFIGMAPS, RESOURCE_CLAIM_TEMPLATES, KubeClient

NAMESPACE = "bench-hostile-filler"
TEMPLATES_NAMESPACE = "bench-hostile-templates"
KEY_BYTES = 50  # a small key's value: the filler is many small keys, each its own string once decoded


def add_arguments(add: Callable[..., Any]) -> None:
    add("--filler-config-maps", type=int, default=20, help="ConfigMaps of each of the filler's kinds (default 20)")
    add("--filler-kb", type=float, default=700.0, help="KiB of small keys in each filler ConfigMap (default 700)")
    add("--filler-labelled", action=argparse.BooleanOptionalAction, default=True,
        help="the filler carries the operator-name label; --no-filler-labelled: the control run, the same writes "
             "that no informer of mpiop's watches (the apiserver filters them out), default labelled")
    add("--filler-claim-templates", type=int, default=20_000,
        help="ResourceClaimTemplates no job names, made by --attacks templates (default 20000)")


def filler(index: int, kind: str, kb: float, labelled: bool = True) -> JSON:
    """One filler ConfigMap: `kind` none (owned by nothing), fake (a fake MPIJob, a name no job makes) or named (a
    fake MPIJob, its hostfile ConfigMap's name)."""
    job = f"ghost-{index}"
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": job, "uid": str(uuid.uuid4()),
             "controller": True}
    name = {"none": f"filler-{index}", "fake": f"filler-fake-{index}", "named": f"{job}-config"}[kind]
    keys = max(1, int(kb * 1024 // (KEY_BYTES + 10)))
    labels = {names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME, names.JOB_NAME_LABEL: job} if labelled else {}
    return {"metadata": {"name": name, "labels": labels,
                         "ownerReferences": [] if kind == "none" else [owner]},
            "data": {f"k{n:06d}": "v" * KEY_BYTES for n in range(keys)}}


async def fill(kube: KubeClient, args: argparse.Namespace) -> None:
    """Make the filler (and say how many ConfigMaps the apiserver took)."""
    await fresh_namespace(kube, NAMESPACE)
    semaphore = asyncio.Semaphore(8)

    async def one(index: int, kind: str) -> int:
        async with semaphore:
            await kube.create(CONFIGMAPS, NAMESPACE, filler(index, kind, args.filler_kb, args.filler_labelled))
            return 1

    made = sum(await asyncio.gather(*(one(i, kind) for kind in ("none", "fake", "named")
                                      for i in range(args.filler_config_maps))))
    log(f"caches: {made} filler ConfigMaps of {args.filler_kb:g} KiB made in {NAMESPACE}")


def claim_template(index: int) -> JSON:
    """A small template of the kind a tenant may make by the thousand: one request of 8 GPUs."""
    exactly = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8}
    return {"apiVersion": RESOURCE_CLAIM_TEMPLATES.api_version, "kind": RESOURCE_CLAIM_TEMPLATES.kind,
            "metadata": {"name": f"filler-template-{index}"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}}}


async def fill_templates(kube: KubeClient, args: argparse.Namespace) -> None:
    """Make the template filler (and say how many the apiserver took, in how long)."""
    await fresh_namespace(kube, TEMPLATES_NAMESPACE)
    semaphore = asyncio.Semaphore(32)
    started = asyncio.get_running_loop().time()

    async def one(index: int) -> int:
        async with semaphore:
            await kube.create(RESOURCE_CLAIM_TEMPLATES, TEMPLATES_NAMESPACE, claim_template(index))
            return 1

    made = sum(await asyncio.gather(*(one(i) for i in range(args.filler_claim_templates))))
    log(f"templates: {made} ResourceClaimTemplates made in {TEMPLATES_NAMESPACE} in "
        f"{asyncio.get_running_loop().time() - started:.1f}s")
