"""A tenant cannot fill the operator's caches (issue 60), on the real apiserver.

On 3cc6b1b the owned informers kept whatever carried kubeflow's operator-name label: twenty labelled ConfigMaps
of ~700 KB of small keys, owned by nothing, grew the leader from 74 to 208 MB in 15 s. Now only objects an MPIJob
controls under one of its names are cached (controller/acceptance.py), with only the labels decisions read and,
of the hostfile ConfigMap, only the keys mpiop writes (controller/trims.py); an MPIJob over --max-mpijob-kib is
cached cut, and fails (policies/cached_size). ResourceClaimTemplates (no selector tells a tenant's from those a job
uses) are kept only while a cached MPIJob names them (kube/wanted.py): on k137 every template of every watched
namespace was kept.
"""

from __future__ import annotations

import asyncio
import functools
import uuid

import orjson

from devcluster.controlplane import ControlPlane
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.controller import trims
from mpiop.kube.client import CONFIGMAPS, PODS, RESOURCE_CLAIM_TEMPLATES, SECRETS, SERVICES, KubeClient, Resource
from mpiop.policies.gpu_slots import FOUND, WAITING
from testkit.dra import NVIDIA, claim_template, device_class_made, exactly, request
from testkit.mpijobs import make_mpijob
from testkit.operator import Cluster, Operator, drive_to_success, eventually, mpijob, running_operator, start_pods

LABELS = {names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME, names.JOB_NAME_LABEL: "pi"}
# Small keys, as the filler: each one a Python string (and dict slot) in a cache that keeps them.
FILLER_DATA = {f"k{n:05d}": "v" * 40 for n in range(2_000)}  # ~100 KB


def fake_owner(name: str = "ghost") -> JSON:
    """A controller reference to an MPIJob that does not exist (any tenant may write one)."""
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": name, "uid": str(uuid.uuid4()),
            "controller": True}


def filler(name: str, *owners: JSON) -> JSON:
    return {"metadata": {"name": name, "labels": LABELS, "ownerReferences": list(owners)}}


async def make_filler(cluster: Cluster, prefix: str) -> dict[Resource, list[str]]:
    """Labelled ConfigMaps, Secrets, Services and pods owned by nothing, or by a fake MPIJob under a name no job
    of it makes; the keys the operator must not cache, by resource."""
    made: dict[Resource, list[str]] = {CONFIGMAPS: [], SECRETS: [], SERVICES: [], PODS: []}
    for n in range(4):
        owners = [fake_owner()] if n % 2 else []
        body = filler(f"{prefix}-filler-{n}", *owners) | {"data": FILLER_DATA}
        made[CONFIGMAPS].append((await cluster.kube.create(CONFIGMAPS, cluster.ns, body))["metadata"]["name"])
    await cluster.kube.create(SECRETS, cluster.ns, filler(f"{prefix}-filler-ssh") | {"stringData": {"k": "v"}})
    made[SECRETS].append(f"{prefix}-filler-ssh")
    service = filler(f"{prefix}-filler", fake_owner(f"{prefix}-other")) | {
        "spec": {"clusterIP": "None", "selector": LABELS}}
    await cluster.kube.create(SERVICES, cluster.ns, service)
    made[SERVICES].append(f"{prefix}-filler")
    pod = filler(f"ghost-worker-{prefix}", fake_owner()) | {
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    await cluster.kube.create(PODS, cluster.ns, pod)
    made[PODS].append(f"ghost-worker-{prefix}")
    return made


def cached_names(operator: Operator, resource: Resource, namespace: str) -> set[str]:
    informer = next(i for i in operator.manager.caches.all() if i.resource == resource)
    return {k.split("/", 1)[1] for k in informer.cached_keys() if k.startswith(f"{namespace}/")}


async def test_labelled_objects_no_job_controls_are_never_cached_and_a_job_still_runs(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    listed = await make_filler(cluster, "early")  # there before the operator starts: its first list sees them
    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
        watched = await make_filler(cluster, "late")  # made while it runs: its watch sees them
        await cluster.create_job(mpijob("pi", workers=1))
        await drive_to_success(cluster, "pi", workers=1)
        await operator.settle()
        for resource in (CONFIGMAPS, SECRETS, SERVICES, PODS):
            cached = cached_names(operator, resource, cluster.ns)
            assert not cached & {*listed[resource], *watched[resource]}, (resource.plural, cached)
        # The job's own objects are cached, and it ran: Succeeded (drive_to_success), its hostfile seen whole.
        assert {"pi-config"} <= cached_names(operator, CONFIGMAPS, cluster.ns)
        assert cached_names(operator, SECRETS, cluster.ns) == {"pi-ssh"}
        assert cached_names(operator, SERVICES, cluster.ns) == {"pi"}
        assert cached_names(operator, PODS, cluster.ns) == {"pi-launcher"}
        hostfile = operator.manager.caches.config_maps.get(f"{cluster.ns}/pi-config")
        assert hostfile is not None and hostfile["data"][names.HOSTFILE_NAME].startswith("pi-worker-0.pi.")


async def test_a_tenants_keys_and_labels_on_its_jobs_config_map_are_neither_kept_nor_fought(
        cluster: Cluster, operator: Operator) -> None:
    """The job's own hostfile ConfigMap, written by its tenant: 2,000 keys and 100 labels more are not cached, and
    mpiop, whose keys are intact, writes nothing (a merge patch could not remove them: comparing them would patch
    every pass)."""
    await cluster.create_job(mpijob("pi", workers=1))
    await start_pods(cluster, "pi", workers=1)
    await operator.settle()
    wanted = dict((await cluster.kube.get(CONFIGMAPS, cluster.ns, "pi-config"))["data"])
    labels = {f"tenant.example/l{n}": "x" * 63 for n in range(100)}
    await cluster.kube.patch(CONFIGMAPS, cluster.ns, "pi-config", {"metadata": {"labels": labels},
                                                                   "data": FILLER_DATA})
    patches = operator.requests.writes()[("PATCH", "configmaps")]
    await operator.settle()
    cached = operator.manager.caches.config_maps.get(f"{cluster.ns}/pi-config")
    assert cached is not None and cached["data"] == wanted
    assert set(cached["metadata"].get("labels") or {}) <= trims.READ_LABELS
    assert operator.requests.writes()[("PATCH", "configmaps")] == patches
    # A key of mpiop's changed by its tenant is put back.
    await cluster.kube.patch(CONFIGMAPS, cluster.ns, "pi-config", {"data": {names.HOSTFILE_NAME: "evil slots=9\n"}})

    async def hostfile_restored() -> bool:
        data = (await cluster.kube.get(CONFIGMAPS, cluster.ns, "pi-config"))["data"]
        return bool(data[names.HOSTFILE_NAME] == wanted[names.HOSTFILE_NAME])

    await eventually(hostfile_restored, what="the hostfile put back")


async def test_an_mpijob_over_the_size_bound_is_cached_cut_and_fails_naming_the_flag(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    """--max-mpijob-kib 64 here (512 by default): a job of ~110 KB of environment fails, one of ordinary size runs."""
    big = mpijob("big", workers=1)
    for spec in big["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["env"] = [
            {"name": f"VARIABLE_{n:04d}", "value": "v" * 40} for n in range(1000)]
    async with running_operator(str(control_plane.kubeconfig), cluster.ns, max_mpijob_kib=64) as operator:
        await cluster.create_job(big)
        await cluster.create_job(mpijob("small", workers=1))
        failed = await eventually(lambda: cluster.condition("big", "Failed"), what="the big job Failed")
        assert failed["reason"] == "ValidationError" and "--max-mpijob-kib" in failed["message"]
        assert "64 KiB" in failed["message"]
        await start_pods(cluster, "small", workers=1)  # Running
        await operator.settle()
        cached = operator.manager.caches.mpijobs.get(f"{cluster.ns}/big")
        assert cached is not None and len(orjson.dumps(cached)) < 4096
        assert not [p for p in await cluster.pods() if p.startswith("big-")]


def eight_gpus(name: str) -> JSON:
    return claim_template(name, request("gpus", exactly(NVIDIA, 8)))


async def make_templates(cluster: Cluster, prefix: str, count: int) -> None:
    """`count` small ResourceClaimTemplates no job names, 100 creations at a time."""
    for start in range(0, count, 100):
        await asyncio.gather(*(cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus(f"{prefix}-{n}"))
                               for n in range(start, min(start + 100, count))))


async def slots_in_hostfile(cluster: Cluster, job: str) -> list[str] | None:
    config = await cluster.kube.get_or_none(CONFIGMAPS, cluster.ns, f"{job}-config")
    text = ((config or {}).get("data") or {}).get(names.HOSTFILE_NAME)
    return text.splitlines() if text else None


async def running_reason(cluster: Cluster, job: str) -> str | None:
    """The reason of the job's Running condition, True or False; None without one."""
    found = ((await cluster.job(job)) or {}).get("status") or {}
    return next((str(c["reason"]) for c in found.get("conditions") or [] if c["type"] == "Running"), None)


async def test_claim_templates_no_job_names_are_never_cached_and_jobs_get_theirs_made_before_or_after_them(
        control_plane: ControlPlane, kube: KubeClient, cluster: Cluster) -> None:
    """2,000 templates no job names, half listed at the start and half watched: none cached. Three jobs get 8 slots
    a worker from theirs: one listed with its template at the start, one whose template was made before it (fetched
    by name when the job came, the job never taken for one waiting), one made before its template (waits
    ResourceClaimTemplateMissing, goes on when it is made)."""
    async with device_class_made(kube, NVIDIA):
        await make_templates(cluster, "early", 1_000)
        await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus("listed-gpus"))
        await cluster.create_job(make_mpijob("listed").workers(2).claim("gpus", "listed-gpus").manifest())
        async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
            templates = operator.manager.caches.claim_templates
            assert templates is not None
            await make_templates(cluster, "late", 1_000)
            await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus("before-gpus"))
            await operator.settle()  # its watch event went by, dropped: no job named it yet
            assert templates.get(f"{cluster.ns}/before-gpus") is None
            await cluster.create_job(make_mpijob("before").workers(2).claim("gpus", "before-gpus").manifest())
            await cluster.create_job(make_mpijob("after").workers(2).claim("gpus", "after-gpus").manifest())
            assert await eventually(functools.partial(running_reason, cluster, "after"),
                                    what="after waiting for its template") == WAITING
            await cluster.kube.create(RESOURCE_CLAIM_TEMPLATES, cluster.ns, eight_gpus("after-gpus"))
            for job in ("listed", "before", "after"):
                hostfile = await eventually(functools.partial(slots_in_hostfile, cluster, job),
                                            what=f"{job}'s hostfile")
                assert hostfile == [f"{job}-worker-{i}.{job}.{cluster.ns}.svc slots=8" for i in range(2)], hostfile
            await operator.settle()
            cached = sorted(templates.cached_keys())
            print(f"\n2,003 templates in {cluster.ns}: the informer keeps {templates.count()}: {cached}")
            assert cached == [f"{cluster.ns}/{n}-gpus" for n in ("after", "before", "listed")]
            assert templates.count() == 3
            assert await running_reason(cluster, "after") == FOUND
            for job in ("listed", "before"):  # never taken for one whose template is missing
                assert await running_reason(cluster, job) is None, job
