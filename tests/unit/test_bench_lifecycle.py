"""bench.lifecycle: the zero-cost operator writes what mpiop's defaults write, at the two moments it acts."""

from __future__ import annotations

import datetime as dt

from bench.harness import bench_job, first_status, owned_objects
from bench.lifecycle import observed, operator_config
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide

NOW = dt.datetime(2026, 11, 23, tzinfo=dt.UTC)


def created_job(workers: int) -> dict[str, object]:
    job = bench_job("life-0", workers)
    job["metadata"].update(namespace="bench-lifecycle", uid="uid-life-0", resourceVersion="1")
    job["status"] = first_status(job)
    return job


def test_once_every_pod_runs_the_plan_is_running_its_event_and_the_hostfile() -> None:
    raw = created_job(8)
    plan = decide(MPIJob.model_validate(raw), observed(owned_objects(raw)), NOW)
    assert plan.status.is_true("Running")
    assert [e.reason for e in plan.events] == ["MPIJobRunning"]
    assert [o["kind"] for o in plan.objects_to_update] == ["ConfigMap"]  # discover_hosts.sh lists the 8 workers
    assert plan.objects_to_update[0]["data"]["discover_hosts.sh"].count("life-0-worker-") == 8
    assert (plan.objects_to_create, plan.pods_to_delete, plan.create_ssh_secret) == ([], [], False)


def test_once_the_launcher_succeeded_the_plan_is_succeeded_and_the_workers_go() -> None:
    raw = created_job(8)
    made = owned_objects(raw)
    running = decide(MPIJob.model_validate(raw), observed(made), NOW).status.to_json()
    plan = decide(MPIJob.model_validate({**raw, "status": running}), observed(made, launcher_phase="Succeeded"), NOW)
    assert plan.status.is_true("Succeeded")
    assert [e.reason for e in plan.events] == ["MPIJobSucceeded"]
    assert sorted(p["metadata"]["name"] for p in plan.pods_to_delete) == [f"life-0-worker-{i}" for i in range(8)]


def test_it_follows_the_operators_flags_the_bench_was_given() -> None:
    default, lean = operator_config([]), operator_config(["--no-lifecycle-events", "--no-discover-hosts"])
    assert (default.lifecycle_events, default.settings.discover_hosts) == (True, True)
    assert (lean.lifecycle_events, lean.settings.discover_hosts) == (False, False)
    raw = created_job(2)
    made = owned_objects(raw, discover_hosts=False)
    plan = decide(MPIJob.model_validate(raw), observed(made), NOW, lean.settings)
    assert plan.status.is_true("Running") and plan.objects_to_update == []  # discover_hosts.sh stays the fixed script
