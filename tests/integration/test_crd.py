"""The MPIJob CRD against a real kube-apiserver: examples apply, kubectl shows it well, bad jobs are refused."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.controlplane import ControlPlane, ControlPlaneError
from devcluster.install import install_crd
from mpiop.api import podtemplate
from mpiop.api.crd import crd
from mpiop.api.raw import JSON
from mpiop.kube.client import MPIJOBS, ApiError, KubeClient
from testkit.kubeflow import with_crd_defaults
from testkit.mpijobs import make_mpijob

pytestmark = pytest.mark.integration

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


async def kubectl(plane: ControlPlane, *args: str, input_text: str | None = None) -> str:
    """kubectl off the event loop, so the session's other async work is not blocked meanwhile."""
    return await asyncio.to_thread(plane.kubectl, *args, input_text=input_text)


def pod_template(image: str = "mpioperator/mpi-pi:openmpi") -> JSON:
    return {"spec": {"containers": [{"name": "main", "image": image}]}}


def valid_job(name: str = "pi") -> JSON:
    return make_mpijob(name).manifest()


def test_there_are_examples() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"pi-openmpi.yaml", "pi-intel.yaml", "pi-mpich.yaml", "gpu-nccl-tests.yaml",
            "tensorflow-benchmarks.yaml", "pi-non-root.yaml", "pytorch-ddp.yaml", "deepspeed.yaml",
            "gpus-total.yaml"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
async def test_example_applies(control_plane: ControlPlane, kube: KubeClient, mpijob_crd: str, namespace: str,
                               example: Path) -> None:
    # Strict field validation: a field the schema does not know (and would prune) fails the apply.
    out = await kubectl(control_plane, "apply", "--validate=strict", "-n", namespace, "-f", str(example))
    manifest = yaml.safe_load(example.read_text())
    name = manifest["metadata"]["name"]
    assert f"mpijob.kubeflow.org/{name} created" in out
    stored = await kube.get(MPIJOBS, namespace, name)
    # Nothing the user wrote was pruned or rewritten (the pod templates included); kubeflow's defaults are added.
    assert stored["spec"] == with_crd_defaults(crd(), manifest)["spec"]


async def test_get_shows_printer_columns(control_plane: ControlPlane, kube: KubeClient, mpijob_crd: str,
                                         namespace: str) -> None:
    await kube.create(MPIJOBS, namespace, valid_job("columns"))
    status = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "MPIJobCreated"},
            {"type": "Running", "status": "True", "reason": "MPIJobRunning"},
        ],
        "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2, "ready": 2}},
        "trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 95,
                          "lastUpdatedTime": "2026-11-26T15:00:00Z"},
    }
    await kube.patch(MPIJOBS, namespace, "columns", {"status": status}, subresource="status")
    out = await kubectl(control_plane, "get", "mpij", "-n", namespace)
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "STATE", "WORKERS", "READY", "PROGRESS", "ETA", "AGE"]
    assert row.split()[:6] == ["columns", "Running", "2", "2", "40", "95"]
    wide = (await kubectl(control_plane, "get", "mpij", "-n", namespace, "-o", "wide")).strip().splitlines()[0]
    for column in ("SCHEDULED", "RANKS RUNNING", "FIRST PROGRESS", "LAST PROGRESS"):  # the attempt's milestones
        assert column in wide, wide
    # The categories put MPIJobs into `kubectl get all` and `kubectl get kubeflow`.
    listed = await kubectl(control_plane, "get", "kubeflow", "-o", "name", "-n", namespace)
    assert "mpijob.kubeflow.org/columns" in listed


async def test_kubectl_wait_for_condition(control_plane: ControlPlane, kube: KubeClient, mpijob_crd: str,
                                          namespace: str) -> None:
    await kube.create(MPIJOBS, namespace, valid_job("waited"))
    conditions = [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded"}]
    await kube.patch(MPIJOBS, namespace, "waited", {"status": {"conditions": conditions}}, subresource="status")
    out = await kubectl(control_plane, "wait", "--for=condition=Succeeded", "--timeout=20s", "-n", namespace,
                        "mpijob/waited")
    assert "condition met" in out


async def explain(plane: ControlPlane, path: str, timeout: float = 60) -> str:
    """kubectl explain, retried while the apiserver is still publishing the new CRD's OpenAPI."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await kubectl(plane, "explain", path)
        except ControlPlaneError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)  # retry interval: the CRD's OpenAPI is published within seconds


async def test_explain_reaches_into_the_pod_template(control_plane: ControlPlane, mpijob_crd: str) -> None:
    for replica in ("Launcher", "Worker"):
        out = await explain(control_plane, f"mpijob.spec.mpiReplicaSpecs.{replica}.template.spec")
        assert "FIELDS:" in out
        assert re.search(r"containers\s+<\[\]Object> -required-", out), out
        assert "List of containers belonging to the pod." in out
    out = await explain(control_plane, "mpijob.spec.mpiReplicaSpecs.Worker.template.spec.containers.resources.limits")
    assert "Limits describes the maximum amount of compute resources allowed." in out
    out = await explain(control_plane, "mpijob.spec.mpiReplicaSpecs.Worker")
    assert "The workers: the pods whose slots the hostfile lists" in out
    out = await explain(control_plane, "mpijob.spec.runPolicy.cleanPodPolicy")
    assert "Defaults to Running" in out
    assert re.search(r"ENUM:\s+None\s+Running\s+All", out), out
    out = await explain(control_plane, "mpijob.spec.slotsPerWorker")
    assert "GPU limit" in out


def _set(path: str, value: Any) -> Callable[[JSON], None]:
    """A mutation setting a dotted path (keys may be map keys such as Launcher), creating dicts on the way."""
    def mutate(job: JSON) -> None:
        *parents, last = path.split(".")
        node = job
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return mutate


def _delete(path: str) -> Callable[[JSON], None]:
    def mutate(job: JSON) -> None:
        *parents, last = path.split(".")
        node = job
        for key in parents:
            node = node[key]
        del node[last]
    return mutate


def _rename_worker(replica_type: str) -> Callable[[JSON], None]:
    """Workers under another key; with runLauncherAsWorker, so only the key itself is wrong."""
    def mutate(job: JSON) -> None:
        specs = job["spec"]["mpiReplicaSpecs"]
        specs[replica_type] = specs.pop("Worker")
        job["spec"]["runLauncherAsWorker"] = True
    return mutate


def _name_and_workers(name: str, workers: int) -> Callable[[JSON], None]:
    def mutate(job: JSON) -> None:
        job["metadata"]["name"] = name
        job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    return mutate


def _total_gpus(gpus: Any, *, replicas: int | None = None, limit: Any = None,
                resource: str | None = None) -> Callable[[JSON], None]:
    """spec.gpus (mpiop's total-GPU mode), with Worker.replicas and the first worker container's limit as given."""
    def mutate(job: JSON) -> None:
        job["spec"]["gpus"] = gpus
        if resource is not None:
            job["spec"]["gpuResource"] = resource
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
        worker.pop("replicas", None)
        if replicas is not None:
            worker["replicas"] = replicas
        if limit is not None:
            container = worker["template"]["spec"]["containers"][0]
            container.setdefault("resources", {})["limits"] = {resource or "nvidia.com/gpu": limit}
    return mutate


REPLICAS = "spec.mpiReplicaSpecs"
GPUS_DISAGREE = "spec.gpus disagrees with spec.mpiReplicaSpecs.Worker.replicas x the first worker container's"
PRODUCT = "limit: their product must be spec.gpus"
INVALID: list[Any] = [
    pytest.param(_delete("spec"), "spec: Required value", id="no-spec"),
    pytest.param(_delete(REPLICAS), "spec.mpiReplicaSpecs: Required value", id="no-replica-specs"),
    pytest.param(_delete(f"{REPLICAS}.Launcher"), "spec.mpiReplicaSpecs.Launcher is required", id="no-launcher"),
    pytest.param(_set(f"{REPLICAS}.Launcher.replicas", 2), "spec.mpiReplicaSpecs.Launcher.replicas must be 1",
                 id="two-launchers"),
    pytest.param(_set(f"{REPLICAS}.Launcher.template.spec.containers", []),
                 "spec.mpiReplicaSpecs.Launcher.template.spec.containers must have at least one container",
                 id="launcher-without-containers"),
    pytest.param(_set(f"{REPLICAS}.Launcher.template", {}),
                 "spec.mpiReplicaSpecs.Launcher.template.spec.containers must have at least one container",
                 id="launcher-without-pod-spec"),
    pytest.param(_set(f"{REPLICAS}.Worker.template.spec.containers", []),
                 "spec.mpiReplicaSpecs.Worker.template.spec.containers must have at least one container",
                 id="worker-without-containers"),
    pytest.param(_set(f"{REPLICAS}.Worker.replicas", 0), "spec.mpiReplicaSpecs.Worker.replicas must be at least 1",
                 id="zero-workers"),
    pytest.param(_set(f"{REPLICAS}.Worker.replicas", -1),
                 "spec.mpiReplicaSpecs.Worker.replicas: Invalid value: -1: "
                 "spec.mpiReplicaSpecs.Worker.replicas in body should be greater than or equal to 0",
                 id="negative-workers"),
    pytest.param(_delete(f"{REPLICAS}.Worker"),
                 "spec.mpiReplicaSpecs.Worker is required unless spec.runLauncherAsWorker is true",
                 id="no-worker"),
    pytest.param(_set(f"{REPLICAS}.Worker.restartPolicy", "Sometimes"),
                 'spec.mpiReplicaSpecs.Worker.restartPolicy: Unsupported value: "Sometimes"',
                 id="bad-restart-policy"),
    pytest.param(_set("spec.runPolicy.cleanPodPolicy", "Finished"),
                 'spec.runPolicy.cleanPodPolicy: Unsupported value: "Finished"', id="bad-clean-pod-policy"),
    pytest.param(_set("spec.mpiImplementation", "MVAPICH"), 'spec.mpiImplementation: Unsupported value: "MVAPICH"',
                 id="bad-mpi-implementation"),
    pytest.param(_set("spec.launcherCreationPolicy", "Later"),
                 'spec.launcherCreationPolicy: Unsupported value: "Later"', id="bad-launcher-creation-policy"),
    pytest.param(_set("spec.slotsPerWorker", -1),
                 "spec.slotsPerWorker in body should be greater than or equal to 0", id="negative-slots"),
    pytest.param(_set("spec.runPolicy.backoffLimit", -1),
                 "spec.runPolicy.backoffLimit in body should be greater than or equal to 0", id="negative-backoff"),
    pytest.param(_set("spec.runPolicy.activeDeadlineSeconds", -5),
                 "spec.runPolicy.activeDeadlineSeconds in body should be greater than or equal to 0",
                 id="negative-deadline"),
    pytest.param(_set("spec.runPolicy.ttlSecondsAfterFinished", -1),
                 "spec.runPolicy.ttlSecondsAfterFinished in body should be greater than or equal to 0",
                 id="negative-ttl"),
    pytest.param(_set("spec.runPolicy.schedulingPolicy.minAvailable", -1),
                 "spec.runPolicy.schedulingPolicy.minAvailable in body should be greater than or equal to 0",
                 id="negative-min-available"),
    pytest.param(_set("spec.runPolicy.schedulingPolicy.minResources", {"cpu": "lots"}),
                 "spec.runPolicy.schedulingPolicy.minResources.cpu in body should match", id="bad-min-resources"),
    pytest.param(_set(f"{REPLICAS}.Worker.replicas", 10_001),
                 "spec.mpiReplicaSpecs.Worker.replicas in body should be less than or equal to 10000",
                 id="replicas-over-maximum"),
    pytest.param(_set("spec.sshAuthMountPath", ".ssh"),
                 "spec.sshAuthMountPath in body should match", id="relative-ssh-path"),
    pytest.param(_set("metadata.name", "a" * 55), "metadata.name: " + "a" * 55 + " is too long for the worker count",
                 id="name-too-long-for-one-worker"),
    pytest.param(_name_and_workers("b" * 53, 101),  # b*53-worker-100: 64 characters
                 "metadata.name: " + "b" * 53 + " is too long for the worker count",
                 id="name-too-long-for-101-workers"),
    pytest.param(_set("metadata.name", "pi.v2"), "metadata.name: pi.v2 is not usable for worker hostnames",
                 id="name-with-dot"),
    pytest.param(_set("metadata.name", "1pi"), "metadata.name: 1pi is not usable for worker hostnames",
                 id="name-starting-with-digit"),
    pytest.param(
        lambda job: job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("name"),
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name: Required value", id="container-without-name"),
    pytest.param(_set(f"{REPLICAS}.Launcher.template.spec.containers", [{"name": "main", "image": 7}]),
                 "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].image: Invalid value: \"integer\"",
                 id="image-not-a-string"),
    pytest.param(_set(f"{REPLICAS}.Worker.template.spec.containers",
                      [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "two"}}}]),
                 "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu",
                 id="bad-gpu-quantity"),
    pytest.param(_total_gpus(0), "spec.gpus: Invalid value: 0: spec.gpus in body should be greater than or equal to 1",
                 id="gpus-zero"),
    pytest.param(_total_gpus(-1), "spec.gpus in body should be greater than or equal to 1", id="gpus-negative"),
    pytest.param(_total_gpus("twelve"), 'spec.gpus: Invalid value: "string": spec.gpus in body must be of type integer',
                 id="gpus-a-string"),
    pytest.param(_total_gpus(12, replicas=2, limit=4), f"{GPUS_DISAGREE} nvidia.com/gpu {PRODUCT}",
                 id="gpus-disagree-with-limits"),
    pytest.param(_total_gpus(12, replicas=2, limit="4", resource="amd.com/gpu"),
                 f"{GPUS_DISAGREE} amd.com/gpu {PRODUCT}", id="gpus-disagree-with-amd-limits"),
    pytest.param(_total_gpus(12, replicas=3), "spec.gpus: set both spec.mpiReplicaSpecs.Worker.replicas and the "
                 "first worker container's nvidia.com/gpu limit", id="gpus-with-replicas-only"),
    pytest.param(_total_gpus(12, limit=4), "spec.gpus: set both", id="gpus-with-limit-only"),
    pytest.param(_total_gpus(8, resource="gpu"), "spec.gpuResource in body should match", id="gpu-resource-no-domain"),
    pytest.param(_set(f"{REPLICAS}.Worker.template.spec.restartPolicy", "Sometimes"),
                 'spec.mpiReplicaSpecs.Worker.template.spec.restartPolicy: Unsupported value: "Sometimes"',
                 id="bad-pod-restart-policy"),
]


@pytest.mark.parametrize(("mutate", "expected"), INVALID)
async def test_invalid_job_is_rejected(kube: KubeClient, mpijob_crd: str, namespace: str,
                                       mutate: Callable[[JSON], None], expected: str) -> None:
    job = valid_job()
    mutate(job)
    with pytest.raises(ApiError) as raised:
        await kube.create(MPIJOBS, namespace, job)
    assert raised.value.status == 422, raised.value
    assert expected in raised.value.message


@pytest.mark.parametrize("mutate", [
    _set(f"{REPLICAS}.Chief", {"template": pod_template()}),
    _rename_worker("Chief"),
], ids=["third-replica-type", "worker-under-another-key"])
async def test_unknown_replica_type_is_refused_as_an_unknown_field(kube: KubeClient, mpijob_crd: str, namespace: str,
                                                                   mutate: Callable[[JSON], None]) -> None:
    """Launcher and Worker are the schema's only keys: another is an unknown field, which kubectl's default strict
    field validation refuses by name (as it does for a typo anywhere in a pod template)."""
    job = valid_job()
    mutate(job)
    with pytest.raises(ApiError) as raised:
        await kube.request("POST", MPIJOBS.path(namespace), body=job, query={"fieldValidation": "Strict"})
    assert raised.value.status == 400, raised.value
    assert 'unknown field "spec.mpiReplicaSpecs.Chief"' in raised.value.message


async def test_the_valid_base_job_is_accepted(kube: KubeClient, mpijob_crd: str, namespace: str) -> None:
    """The table above fails for the reason it names, not because its base job was invalid already."""
    created = await kube.create(MPIJOBS, namespace, valid_job())
    assert created["metadata"]["name"] == "pi"
    launcher_only = valid_job("solo")
    del launcher_only["spec"]["mpiReplicaSpecs"]["Worker"]
    launcher_only["spec"]["runLauncherAsWorker"] = True
    await kube.create(MPIJOBS, namespace, launcher_only)
    longest = valid_job("c" * 51)
    longest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 10_000  # c*51-worker-9999: 63 characters
    await kube.create(MPIJOBS, namespace, longest)
    for name, mutate in (("gpus", _total_gpus(64)), ("gpus-mig", _total_gpus(7, resource="nvidia.com/mig-1g.5gb")),
                         ("gpus-laid-out", _total_gpus(12, replicas=3, limit="4"))):
        total = valid_job(name)
        mutate(total)
        await kube.create(MPIJOBS, namespace, total)
    at_limit = valid_job("d" * 53)
    at_limit["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 100  # d*53-worker-99: 63 characters
    await kube.create(MPIJOBS, namespace, at_limit)


async def test_managed_by_is_immutable(kube: KubeClient, mpijob_crd: str, namespace: str) -> None:
    job = valid_job("managed")
    job["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue"}
    await kube.create(MPIJOBS, namespace, job)
    for change in ({"managedBy": "kubeflow.org/mpi-operator"}, {"managedBy": None}):
        with pytest.raises(ApiError) as raised:
            await kube.patch(MPIJOBS, namespace, "managed", {"spec": {"runPolicy": change}})
        assert "spec.runPolicy.managedBy is immutable" in raised.value.message
    # Other fields stay mutable (suspend is how Kueue starts and stops jobs).
    await kube.patch(MPIJOBS, namespace, "managed", {"spec": {"runPolicy": {"suspend": True}}})

    await kube.create(MPIJOBS, namespace, valid_job("unmanaged"))
    with pytest.raises(ApiError) as raised:
        await kube.patch(MPIJOBS, namespace, "unmanaged", {"spec": {"runPolicy": {"managedBy": "someone/else"}}})
    assert "spec.runPolicy.managedBy is immutable" in raised.value.message


async def test_template_metadata_is_kept(kube: KubeClient, mpijob_crd: str, namespace: str) -> None:
    """Labels and annotations in a pod template survive (controller-gen's plain `metadata: object` prunes them)."""
    job = valid_job("meta")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    worker["metadata"] = {"labels": {"team": "hpc"}, "annotations": {"example.com/note": "x"}}
    stored = await kube.create(MPIJOBS, namespace, copy.deepcopy(job))
    assert stored["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] == worker["metadata"]


async def test_podtemplate_snapshot_is_what_the_apiserver_serves(kube: KubeClient) -> None:
    """The committed PodTemplateSpec definitions are the running apiserver's own, not hand-written."""
    document = await kube.request("GET", podtemplate.OPENAPI_PATH)
    version = (await kube.request("GET", "/version"))["gitVersion"]
    snapshot = json.loads(podtemplate.SNAPSHOT_PATH.read_text())
    assert snapshot["kubernetesVersion"] == version
    assert snapshot == podtemplate.snapshot_document(document, version), (
        "the PodTemplateSpec snapshot is stale: run `make podtemplate-schema crds`"
    )


async def test_install_crd_updates_in_place(kube: KubeClient, mpijob_crd: str, namespace: str) -> None:
    """A second install (make run after an upgrade) replaces the CRD and keeps existing jobs."""
    await kube.create(MPIJOBS, namespace, valid_job("kept"))
    await install_crd(kube, timeout=30)
    assert (await kube.get(MPIJOBS, namespace, "kept"))["metadata"]["name"] == "kept"
