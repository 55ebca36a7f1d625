"""GPUs through DRA on the real apiserver (resource.k8s.io/v1, served by default in v1.34): a worker that claims its
GPUs from a ResourceClaimTemplate gets as many slots as the template's devices, in the hostfile, the presets and
`kubectl mpijob`'s rank map; a job whose template comes later waits for it, and one asking for All devices without
slotsPerWorker fails naming the field; an operator whose role predates ResourceClaimTemplates runs on, such a job
waiting saying why. No kubelet or DRA driver runs: the slots are decided before any device is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.kube.client import CONFIGMAPS, RESOURCE_CLAIM_TEMPLATES, KubeClient
from mpiop.plugin.main import Which, pod_name
from mpiop.policies.gpu_slots import WAITING
from testkit.dra import NVIDIA, claim_template, device_class_made, exactly, request
from testkit.mpijobs import make_mpijob
from testkit.operator import Cluster, Operator, drive_to_success, eventually, mpijob, running_operator
from testkit.pods import env_of
from testkit.rbac import base_rules, namespaced_role_kubeconfig

pytestmark = pytest.mark.integration


@pytest.fixture
async def nvidia_class(kube: KubeClient) -> AsyncIterator[str]:
    async with device_class_made(kube, NVIDIA) as name:
        yield name


def eight_gpus(name: str = "eight-gpus", all_devices: bool = False) -> JSON:
    count = None if all_devices else 8
    return claim_template(name, request("gpus", exactly(NVIDIA, count, all_devices=all_devices)))


def dra_job(name: str, template: str = "eight-gpus") -> JSON:
    return make_mpijob(name).workers(2).claim("gpus", template).manifest()


async def hostfile(cluster: Cluster, job: str) -> str | None:
    config = await cluster.kube.get_or_none(CONFIGMAPS, cluster.ns, f"{job}-config")
    return ((config or {}).get("data") or {}).get("hostfile")


async def waiting(cluster: Cluster, job: str) -> JSON | None:
    """The job's Running=False condition while it waits for a ResourceClaimTemplate."""
    found = await cluster.job(job)
    return next((c for c in ((found or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == "Running" and c["reason"] == WAITING), None)


async def test_two_workers_claiming_8_devices_each_get_8_slots(cluster: Cluster, operator: Operator,
                                                                nvidia_class: str) -> None:
    made = await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus())
    assert made["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": 8}
    await cluster.create_job(dra_job("dra"))
    text = await eventually(lambda: hostfile(cluster, "dra"), what="dra's hostfile")
    print(f"\nhostfile of dra:\n{text}", end="")
    assert text.splitlines() == [f"dra-worker-{i}.dra.{cluster.ns}.svc slots=8" for i in range(2)]

    async def workers() -> dict[str, JSON] | None:
        pods = await cluster.pods()
        return pods if {"dra-worker-0", "dra-worker-1", "dra-launcher"} <= set(pods) else None

    pods = await eventually(workers, what="dra's pods")
    worker = pods["dra-worker-1"]["spec"]
    assert worker["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    env = env_of(pods["dra-worker-1"])
    assert (env["LOCAL_WORLD_SIZE"], env["WORLD_SIZE"]) == ("8", "16")
    assert env_of(pods["dra-launcher"])["OMPI_MCA_orte_set_default_slots"] == "8"
    job = MPIJob.model_validate(await cluster.job("dra"))
    ranks = {rank: await pod_name(cluster.kube, job, Which(rank, None, False), 0) for rank in (0, 7, 8, 15)}
    print(f"kubectl mpijob's rank -> pod: {ranks}")
    assert ranks == {0: "dra-worker-0", 7: "dra-worker-0", 8: "dra-worker-1", 15: "dra-worker-1"}


async def test_a_job_waits_for_its_template_and_goes_on_once_it_is_made(cluster: Cluster, operator: Operator,
                                                                         nvidia_class: str) -> None:
    await cluster.create_job(dra_job("later", "later-gpus"))
    condition = await eventually(lambda: waiting(cluster, "later"), what="later waiting for its ResourceClaimTemplate")
    assert condition["message"] == (f"MPIJob {cluster.ns}/later waits: ResourceClaimTemplate later-gpus of claim gpus "
                                    "in the Worker template: not found")
    await operator.settle()
    assert await hostfile(cluster, "later") is None and not await cluster.pods(), "nothing made while it waits"
    await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus("later-gpus"))
    text = await eventually(lambda: hostfile(cluster, "later"), what="later's hostfile once its template is made")
    print(f"\nhostfile of later:\n{text}", end="")
    assert text.count("slots=8") == 2


async def test_all_devices_without_slots_per_worker_fail_naming_the_field(cluster: Cluster, operator: Operator,
                                                                          nvidia_class: str) -> None:
    await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus("every-gpu", all_devices=True))
    await cluster.create_job(dra_job("every", "every-gpu"))
    failed = await eventually(lambda: cluster.condition("every", "Failed"), what="every failed")
    print(f"\n{failed['reason']}: {failed['message']}")
    assert (failed["reason"], failed["message"]) == ("ValidationError", (
        f"MPIJob {cluster.ns}/every has failed: spec.slotsPerWorker: must be set: claim gpus in the Worker template "
        "(ResourceClaimTemplate every-gpu, request gpus) asks for All devices of class gpu.nvidia.com, a count known "
        "only once allocated"))
    assert await hostfile(cluster, "every") is None


async def test_a_role_without_claim_templates_runs_on_and_a_dra_job_waits_saying_why(
        control_plane: ControlPlane, kube: KubeClient, cluster: Cluster, nvidia_class: str, tmp_path: Path) -> None:
    rules = [r for r in base_rules(control_plane) if r["resources"] != ["resourceclaimtemplates"]]
    assert len(rules) < len(base_rules(control_plane)), "deploy/base no longer grants them: nothing to take away"
    kubeconfig = await namespaced_role_kubeconfig(control_plane, kube, tmp_path / "kubeconfig", cluster.ns,
                                                  "mpiop-before-dra", rules)
    await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus())
    async with running_operator(kubeconfig, cluster.ns) as operator:
        assert operator.manager.caches.claim_templates is None
        assert ("GET", "resourceclaimtemplates", 403) in operator.requests.calls
        await cluster.create_job(dra_job("dra"))
        await cluster.create_job(mpijob("plain", workers=1))
        running = await eventually(lambda: waiting(cluster, "dra"), what="dra waiting")
        await drive_to_success(cluster, "plain")
    print(f"\n{running['reason']}: {running['message']}")
    assert running["reason"] == WAITING and running["message"].startswith(
        f"MPIJob {cluster.ns}/dra waits: ResourceClaimTemplate eight-gpus of claim gpus in the Worker template: mpiop "
        "does not watch ResourceClaimTemplates")
    assert await hostfile(cluster, "dra") is None
