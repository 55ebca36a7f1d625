"""The ResourceClaimTemplate informer: trimmed to what a worker's slots read, keeping only the templates a cached job
names (issue 60: a tenant's other templates cost nothing kept), one made before its job fetched once by name, handed
to the jobs whose claims are made from a template, and a template's change queues exactly those jobs (a job waiting
for it goes on at once)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

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
    job = make_mpijob("pi", "ns").claim("gpus", "eight").claim("more", "missing").obj()
    add_job(m, job)
    for name in ("eight", "unrelated"):
        m.caches.claim_templates.apply_event({"type": "ADDED", "object": template(name)})
    assert sorted(m.caches.claim_templates.cached_keys()) == ["ns/eight"], "no job names unrelated"
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


def job_raw(job: MPIJob, version: int = 1) -> JSON:
    raw = job.model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["metadata"]["resourceVersion"] = str(version)
    return raw


async def test_only_the_templates_cached_jobs_name_are_kept_in_their_namespace_while_they_name_them() -> None:
    m = manager()
    templates = m.caches.claim_templates
    assert templates is not None
    add_job(m, make_mpijob("pi", "ns").claim("gpus", "eight").obj())
    add_job(m, make_mpijob("again", "ns").claim("gpus", "eight").obj())
    add_job(m, make_mpijob("total", "ns").total_gpus(16, device_class="gpu.nvidia.com").obj())
    for n in range(2_000):
        templates.apply_event({"type": "ADDED", "object": template(f"filler-{n}")})
    for name in ("eight", "total-gpus", "pi-gpus"):  # pi states no spec.gpus: its <job>-gpus is no concern of it
        templates.apply_event({"type": "ADDED", "object": template(name)})
    elsewhere = template("eight")
    elsewhere["metadata"]["namespace"] = "other"
    templates.apply_event({"type": "ADDED", "object": elsewhere})
    assert sorted(templates.cached_keys()) == ["ns/eight", "ns/total-gpus"]
    assert templates.wanted_count() == 2
    m.caches.mpijobs.apply_event({"type": "DELETED", "object": job_raw(make_mpijob("pi", "ns").obj())})
    assert sorted(templates.cached_keys()) == ["ns/eight", "ns/total-gpus"], "again still names eight"
    renamed = make_mpijob("again", "ns").claim("gpus", "four").obj()
    m.caches.mpijobs.apply_event({"type": "MODIFIED", "object": job_raw(renamed, version=2)})
    m.caches.mpijobs.apply_event({"type": "DELETED", "object": job_raw(
        make_mpijob("total", "ns").total_gpus(16, device_class="gpu.nvidia.com").obj())})
    assert templates.count() == 0 and templates.wanted_count() == 1, "only four is wanted, and it does not exist"
    m.queue.shut_down()


class Gets:
    """The apiserver's answers to GETs of templates, by name, counted."""

    def __init__(self, *names: str) -> None:
        self.existing = {n: template(n, version=7) for n in names}
        self.asked: list[str] = []

    async def get_or_none(self, resource: Any, namespace: str | None, name: str) -> JSON | None:
        self.asked.append(f"{namespace}/{name}")
        await asyncio.sleep(0)
        found = self.existing.get(name)
        return copy.deepcopy(found) if found is not None else None


async def test_a_template_made_before_its_job_is_fetched_once_and_the_job_waits_for_the_fetch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager()
    templates = m.caches.claim_templates
    assert templates is not None
    gets = Gets("eight")
    monkeypatch.setattr(m.client, "get_or_none", gets.get_or_none)
    templates.synced.set()  # listed (and dropped "eight": no job named it then), now watching
    job = make_mpijob("pi", "ns").claim("gpus", "eight").claim("more", "missing").obj()
    add_job(m, job)
    assert templates.fetching() == 2 and templates.count() == 0
    await m.caches.claim_templates_fetched(job)  # what the reconciler awaits before it reads the cache
    assert sorted(templates.cached_keys()) == ["ns/eight"]
    assert sorted(gets.asked) == ["ns/eight", "ns/missing"]
    assert set(await drain(m)) == {"ns/pi"}, "queued by the job, and again by its template's arrival"
    add_job(m, make_mpijob("second", "ns").claim("gpus", "eight").obj())
    assert templates.fetching() == 0 and len(gets.asked) == 2, "wanted already: no second fetch"
    m.queue.shut_down()


async def test_a_fetch_answered_after_the_watch_deleted_it_or_after_the_job_went_keeps_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager()
    templates = m.caches.claim_templates
    assert templates is not None
    gets = Gets("eight", "four")
    monkeypatch.setattr(m.client, "get_or_none", gets.get_or_none)
    templates.synced.set()
    add_job(m, make_mpijob("pi", "ns").claim("gpus", "eight").obj())
    deleted = template("eight", version=9)  # the watch's deletion, newer than the fetch's answer (7)
    templates.apply_event({"type": "DELETED", "object": deleted})
    add_job(m, make_mpijob("gone", "ns").claim("gpus", "four").obj())
    m.caches.mpijobs.apply_event({"type": "DELETED", "object": job_raw(make_mpijob("gone", "ns").claim(
        "gpus", "four").obj())})
    await templates.fetched(["ns/eight", "ns/four"])
    await asyncio.sleep(0)
    assert templates.count() == 0 and templates.fetching() == 0
    m.queue.shut_down()


async def test_a_template_named_while_the_list_runs_is_fetched_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its list item went by before any job named it: dropped, then fetched once the list is done."""
    m = manager()
    templates = m.caches.claim_templates
    assert templates is not None
    gets = Gets("early")

    async def list_each(resource: Any, namespace: str | None, keep: Any, **query: Any) -> JSON:
        keep(template("early"))
        keep(template("filler"))
        add_job(m, make_mpijob("pi", "ns").claim("gpus", "early").claim("more", "filler").obj())
        assert templates.fetching() == 0, "not while the list runs"
        keep(template("filler"))  # named now: the rest of the list keeps it
        return {"resourceVersion": "10"}

    monkeypatch.setattr(m.client, "get_or_none", gets.get_or_none)
    monkeypatch.setattr(m.client, "list_each", list_each)
    await templates.relist()
    assert sorted(templates.cached_keys()) == ["ns/filler"] and templates.fetching() == 2
    await templates.fetched(["ns/early", "ns/filler"])
    assert sorted(templates.cached_keys()) == ["ns/early", "ns/filler"]
    m.queue.shut_down()
