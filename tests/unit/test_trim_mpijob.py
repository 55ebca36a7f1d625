"""controller.trims.trim_mpijob and policies.cached_size: what the MPIJob cache keeps of a tenant's job is bounded
(--max-mpijob-kib), and a job over the bound fails with ValidationError naming it, its pods going as its
cleanPodPolicy says."""

from __future__ import annotations

import copy

import orjson
import pytest

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.trims import trim_mpijob
from mpiop.decide import decide
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.plan import Observed
from mpiop.policies import cached_size
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod

BOUND = DEFAULT_SETTINGS.max_mpijob_kib * 1024
JOB = make_mpijob("pi", "ns").workers(2)


def with_env(job: MPIJobBuilder, variables: int, value_bytes: int = 40) -> JSON:
    """The job's JSON with `variables` environment variables in each template's first container."""
    raw: JSON = job.json()
    for spec in raw["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["env"] = [
            {"name": f"VARIABLE_{n:05d}", "value": "v" * value_bytes} for n in range(variables)]
    return raw


def size(raw: JSON) -> int:
    return len(orjson.dumps(raw))


@pytest.mark.parametrize(("raw", "whole"), [
    (JOB.json(), True),
    (with_env(JOB, 1000), True),  # a thousand variables in each template: ~130 KB, kept whole
    (with_env(JOB, 5000), False),  # ~650 KB
], ids=["common", "thousand-variables", "five-thousand-variables"])
def test_a_job_is_kept_whole_up_to_the_bound(raw: JSON, whole: bool) -> None:
    raw["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    raw["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = "x" * BOUND
    trimmed = trim_mpijob(copy.deepcopy(raw), BOUND)
    assert "managedFields" not in trimmed["metadata"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in trimmed["metadata"].get("annotations", {})
    assert (cached_size.CUT_ANNOTATION not in trimmed["metadata"]["annotations"]) == whole
    if not whole:
        assert size(trimmed) < 2048
        assert trimmed["spec"]["mpiReplicaSpecs"] == {"Launcher": {"replicas": 1}, "Worker": {"replicas": 2}}


def test_a_tenants_own_cut_mark_is_dropped() -> None:
    raw = JOB.json()
    raw["metadata"]["annotations"] = {cached_size.CUT_ANNOTATION: "1"}
    assert cached_size.CUT_ANNOTATION not in trim_mpijob(raw, BOUND)["metadata"]["annotations"]


def test_a_job_over_the_bound_fails_naming_the_flag_and_builds_nothing() -> None:
    cut = MPIJob.model_validate(trim_mpijob(with_env(JOB, 5000), BOUND))
    plan = decide(cut, Observed(), at(0))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message is not None and "--max-mpijob-kib" in failed.message and "512 KiB" in failed.message
    assert plan.objects_to_create == [] and not plan.create_ssh_secret


def test_a_running_job_edited_over_the_bound_fails_and_its_running_workers_go() -> None:
    running = make_mpijob("pi", "ns").workers(2).condition("Running")
    cut = MPIJob.model_validate(trim_mpijob(with_env(running, 5000), BOUND))
    workers = [make_pod(running.obj(), "worker", i, 0).running().obj() for i in range(2)]
    plan = decide(cut, Observed(pods=workers), at(10))
    assert plan.status.is_true("Failed")
    assert sorted(p["metadata"]["name"] for p in plan.pods_to_delete) == ["pi-worker-0", "pi-worker-1"]
