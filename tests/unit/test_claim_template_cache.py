"""The ResourceClaimTemplate informer: trimmed to what a worker's slots read, handed to the jobs whose claims are
made from a template, and a template's change queues exactly those jobs (a job waiting for it goes on at once)."""

from __future__ import annotations

import copy

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.caches import same_but_version
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.controller.trims import trim_claim_template
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import KubeClient
from testkit.dra import claim_template, exactly, request
from testkit.mpijobs import make_mpijob

SELECTOR = {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "H100"'}}


def template(name: str, count: int = 8, version: int = 1) -> JSON:
    found = claim_template(name, request("gpus", exactly("gpu.nvidia.com", count, selectors=[SELECTOR])),
                           request("any", first_available=[exactly("gpu.nvidia.com", 2), exactly("mig.nvidia.com", 2)]),
                           namespace="ns")
    found["metadata"].update(uid=f"uid-{name}", resourceVersion=str(version))
    found["spec"]["spec"]["devices"]["constraints"] = [{"requests": ["gpus"], "matchAttribute": "x/y"}]
    return found


def manager(settings: Settings = DEFAULT_SETTINGS) -> Manager:
    return Manager(KubeClient(ClusterAccess("http://127.0.0.1:1")), ManagerConfig(namespace="ns", settings=settings))


def add_job(m: Manager, job: MPIJob) -> None:
    raw = job.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["metadata"]["resourceVersion"] = "1"
    m.caches.mpijobs.apply_event({"type": "ADDED", "object": raw})


async def drain(m: Manager) -> list[str]:
    keys = []
    while len(m.queue):
        keys.append(key := await m.queue.get())
        m.queue.done(key)
    return keys


def test_a_template_is_trimmed_to_its_requests_device_classes_and_counts() -> None:
    trimmed = trim_claim_template(copy.deepcopy(template("t")))
    assert trimmed["spec"] == {"spec": {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 8}},
        {"name": "any", "firstAvailable": [
            {"name": "any-0", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2},
            {"name": "any-1", "deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 2}]},
    ]}}}
    assert trimmed["metadata"]["name"] == "t"
    reselected = template("t", version=2)
    reselected["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = []
    assert same_but_version(trimmed, trim_claim_template(reselected)), "a selector does not change the slots"
    assert not same_but_version(trimmed, trim_claim_template(template("t", count=4, version=2)))


async def test_a_templates_change_queues_the_jobs_whose_claims_are_made_from_it() -> None:
    m = manager()
    assert m.caches.claim_templates is not None
    add_job(m, make_mpijob("pi", "ns").claim("gpus", "eight").obj())
    add_job(m, make_mpijob("other", "ns").claim("gpus", "four").obj())
    add_job(m, make_mpijob("plain", "ns").gpus(8).obj())
    await drain(m)
    m.caches.claim_templates.apply_event({"type": "ADDED", "object": template("eight")})
    assert await drain(m) == ["ns/pi"]
    m.caches.claim_templates.apply_event({"type": "MODIFIED", "object": template("eight", 4, version=2)})
    assert await drain(m) == ["ns/pi"]
    reselected = template("eight", 4, version=3)
    reselected["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = []
    m.caches.claim_templates.apply_event({"type": "MODIFIED", "object": reselected})
    assert await drain(m) == [], "nothing the slots read changed"
    m.caches.claim_templates.apply_event({"type": "DELETED", "object": reselected})
    assert await drain(m) == ["ns/pi"]
    m.queue.shut_down()


async def test_a_job_observes_the_templates_its_claims_name() -> None:
    m = manager()
    assert m.caches.claim_templates is not None
    for name in ("eight", "unrelated"):
        m.caches.claim_templates.apply_event({"type": "ADDED", "object": template(name)})
    job = make_mpijob("pi", "ns").claim("gpus", "eight").claim("more", "missing").obj()
    found = m.caches.observed(job).claim_templates
    assert found is not None and sorted(found) == ["eight"]
    assert found["eight"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 8
    assert m.caches.observed(make_mpijob("plain", "ns").obj()).claim_templates == {}
    m.queue.shut_down()


def test_without_gpu_device_classes_templates_are_not_watched() -> None:
    m = manager(Settings(gpu_device_classes=frozenset()))
    assert m.caches.claim_templates is None
    assert m.caches.observed(make_mpijob("pi", "ns").claim("gpus", "eight").obj()).claim_templates is None
    m.queue.shut_down()
