"""mpiop.desired.ensure: what to create, update and delete so the job's objects match what it wants."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ensure, hostfile, objects
from mpiop.desired.hostnetwork import NO_PORTS
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from mpiop.policies import host_ports, launcher_creation
from testkit.mpijobs import make_mpijob
from testkit.pods import PodBuilder, make_pod, observe


def run(job: MPIJob, observed: Observed, cluster_domain: str = "") -> Plan:
    plan = Plan(status=job.status.model_copy(deep=True))
    settings = Settings(cluster_domain=cluster_domain)
    ensure.supporting_objects(plan, job, observed, host_ports.for_plan(plan, job, observed, settings), settings)
    attempt = plan.status.attempt
    may_start = launcher_creation.launcher_may_start(job, observed, attempt)
    ensure.job_pods(plan, job, observed, may_start, host_ports.for_plan(plan, job, observed, settings), settings)
    return plan


def created(plan: Plan) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in plan.objects_to_create]


def deleted(plan: Plan) -> list[str]:
    return [podstate.name(p) for p in plan.pods_to_delete]


def test_fresh_job_creates_everything() -> None:
    job = make_mpijob("pi").workers(2).obj()
    plan = run(job, Observed())
    assert plan.create_ssh_secret is True
    assert created(plan) == ["Service/pi", "ConfigMap/pi-config", "Pod/pi-worker-0",
                             "Pod/pi-worker-1", "Pod/pi-launcher"]
    assert plan.objects_to_update == []
    assert plan.pods_to_delete == []
    config_map = plan.objects_to_create[1]
    assert config_map["data"] == objects.config_map_data(job, [])
    assert config_map["data"]["discover_hosts.sh"] == "#!/bin/sh\n"
    assert {o["metadata"]["labels"].get(names.ATTEMPT_LABEL) for o in plan.objects_to_create[2:]} == {"0"}


def test_fresh_job_uses_cluster_domain() -> None:
    job = make_mpijob("pi", "ns").workers(1).obj()
    plan = run(job, Observed(), "cluster.local")
    assert plan.objects_to_create[1]["data"]["hostfile"] == "pi-worker-0.pi.ns.svc.cluster.local slots=1\n"


def test_settled_job_plans_nothing() -> None:
    job = make_mpijob("pi").workers(2).obj()
    pods = [make_pod(job, "worker", 0).running().obj(), make_pod(job, "worker", 1).running().obj(),
            make_pod(job, "launcher").running().obj()]
    plan = run(job, observe(job, pods))
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete,
            plan.create_ssh_secret) == ([], [], [], False)


def test_restart_attempt_pods_are_made_with_the_current_attempt() -> None:
    job = make_mpijob("pi").workers(1).status(restart_count=2).obj()
    plan = run(job, observe(job))
    assert created(plan) == ["Pod/pi-worker-0", "Pod/pi-launcher-2"]
    assert [o["metadata"]["labels"][names.ATTEMPT_LABEL] for o in plan.objects_to_create] == ["2", "2"]


def test_existing_objects_not_recreated() -> None:
    job = make_mpijob("pi").workers(1).obj()
    plan = run(job, Observed(secret={"kind": "Secret"}, service={"kind": "Service"}))
    assert plan.create_ssh_secret is False
    assert created(plan) == ["ConfigMap/pi-config", "Pod/pi-worker-0", "Pod/pi-launcher"]


def test_missing_worker_is_made_again() -> None:
    job = make_mpijob("pi").workers(3).obj()
    pods = [make_pod(job, "worker", 0).running().obj(), make_pod(job, "worker", 2).running().obj(),
            make_pod(job, "launcher").running().obj()]
    plan = run(job, observe(job, pods))
    assert created(plan) == ["Pod/pi-worker-1"]
    assert plan.pods_to_delete == []
    # It replaces a worker the launcher started with: it carries the launcher's uid (status/failure_report).
    assert plan.objects_to_create[0]["metadata"]["labels"][names.REPLACEMENT_LABEL] == pods[2]["metadata"]["uid"]


def test_a_worker_made_under_a_launcher_without_its_count_is_no_replacement() -> None:
    """A launcher made before mpiop recorded its worker count: which workers it started with is not known."""
    job = make_mpijob("pi").workers(2).obj()
    pods = [make_pod(job, "worker", 0).running().obj(),
            make_pod(job, "launcher").launched_workers(None).running().obj()]
    plan = run(job, observe(job, pods))
    assert created(plan) == ["Pod/pi-worker-1"]
    assert names.REPLACEMENT_LABEL not in plan.objects_to_create[0]["metadata"]["labels"]


def test_wait_for_workers_ready_ignores_ready_pods_of_an_old_attempt() -> None:
    job = make_mpijob("pi").workers(1).wait_for_workers_ready().status(restart_count=1).obj()
    pods = [make_pod(job, "worker", 0, attempt=0).ready().obj()]
    plan = run(job, observe(job, pods))
    assert created(plan) == []
    assert deleted(plan) == ["pi-worker-0"]


def test_at_startup_the_launcher_is_planned_with_its_workers_as_the_step_after_them() -> None:
    job = make_mpijob("pi").workers(2).launcher_creation_policy("AtStartup").obj()
    plan = run(job, observe(job))
    assert created(plan) == ["Pod/pi-worker-0", "Pod/pi-worker-1", "Pod/pi-launcher"]
    assert [[o["metadata"]["name"] for o in step] for step in plan.creation_steps.pod_steps()] == [
        ["pi-worker-0", "pi-worker-1"], ["pi-launcher"]]


def test_stale_attempt_pods_deleted_and_not_recreated_until_gone() -> None:
    job = make_mpijob("pi").workers(2).status(restart_count=1).obj()
    old = [make_pod(job, "worker", 0, 0).running().obj(), make_pod(job, "worker", 1, 0).failed().obj(),
           make_pod(job, "launcher", 0, 0).running().obj()]
    plan = run(job, observe(job, old))
    assert deleted(plan) == ["pi-worker-0", "pi-worker-1", "pi-launcher"]
    assert created(plan) == []

    # Being deleted: not deleted again, still not re-created.
    going = [make_pod(job, "worker", 0, 0).running().terminating().obj(),
             make_pod(job, "launcher", 0, 0).running().terminating().obj()]
    plan = run(job, observe(job, going))
    assert plan.pods_to_delete == []
    assert created(plan) == ["Pod/pi-worker-1"]
    assert plan.objects_to_create[0]["metadata"]["labels"][names.ATTEMPT_LABEL] == "1"

    # Gone: made again, in the new attempt (whose launcher has its own name).
    plan = run(job, observe(job))
    assert created(plan) == ["Pod/pi-worker-0", "Pod/pi-worker-1", "Pod/pi-launcher-1"]


@pytest.mark.parametrize(("old_launcher", "launcher_made"), [
    (lambda b: b.running().terminating(), False),  # its mpirun may still run, for its grace period
    (lambda b: b.pending().terminating(), False),
    (lambda b: b.failed().terminating(), True),  # its containers ended: nothing of it runs
    (lambda b: b.failed(), True),  # kept for its log, not being deleted
], ids=["running-terminating", "pending-terminating", "failed-terminating", "failed-kept"])
def test_the_next_launcher_waits_for_an_earlier_one_still_terminating(
        old_launcher: Callable[[PodBuilder], PodBuilder], launcher_made: bool) -> None:
    """kubeflow #810: a launcher being deleted still runs mpirun until its grace period ends; a new one made
    meanwhile reaches the same workers (same names, same key) and the work is done twice."""
    job = make_mpijob("pi").workers(1).status(restart_count=1).obj()
    pods = [old_launcher(make_pod(job, "launcher", 0, 0)).obj()]
    plan = run(job, observe(job, pods))
    assert created(plan) == ["Pod/pi-worker-0", *(["Pod/pi-launcher-1"] if launcher_made else [])]


def test_failed_launcher_of_the_last_attempt_is_kept_older_ones_go() -> None:
    job = make_mpijob("pi").workers(1).status(restart_count=2).obj()
    pods = [make_pod(job, "launcher", 0, 1).failed().obj(), make_pod(job, "launcher", 0, 0).failed().obj(),
            make_pod(job, "worker", 0, 2).running().obj()]
    plan = run(job, observe(job, pods))
    assert deleted(plan) == ["pi-launcher"]
    assert created(plan) == ["Pod/pi-launcher-2"]


@pytest.mark.parametrize(
    "pod",
    [make_pod(make_mpijob("pi"), "worker", 0).label(names.ATTEMPT_LABEL, "x").running(),
     make_pod(make_mpijob("pi"), "worker", 0).label(names.REPLICA_INDEX_LABEL, "").running()],
    ids=["garbage-attempt", "no-index"],
)
def test_unreadable_pods_are_stale(pod: PodBuilder) -> None:
    job = make_mpijob("pi").workers(1).obj()
    plan = run(job, observe(job, [pod.obj(), make_pod(job, "launcher").running().obj()]))
    assert deleted(plan) == ["pi-worker-0"]
    assert created(plan) == []


def test_scale_down_deletes_extra_workers() -> None:
    job = make_mpijob("pi", "ns").workers(2).obj()
    pods = [make_pod(job, "worker", i).running().obj() for i in range(4)]
    pods.append(make_pod(job, "launcher").running().obj())
    before = make_mpijob("pi", "ns").workers(4).obj()
    observed = observe(job, pods)
    observed.config_map = objects.config_map(before, range(4))
    plan = run(job, observed)
    assert deleted(plan) == ["pi-worker-2", "pi-worker-3"]
    assert created(plan) == []
    [config_map] = plan.objects_to_update
    assert config_map["data"] == {
        "hostfile": "pi-worker-0.pi.ns.svc slots=1\npi-worker-1.pi.ns.svc slots=1\n",
        "discover_hosts.sh": "#!/bin/sh\necho pi-worker-0.pi.ns.svc:1\necho pi-worker-1.pi.ns.svc:1\n",
    }


def test_scale_up_creates_only_new_workers() -> None:
    job = make_mpijob("pi").workers(3).obj()
    pods = [make_pod(job, "worker", i).running().obj() for i in range(2)]
    pods.append(make_pod(job, "launcher").launched_workers(2).running().obj())
    observed = observe(job, pods)
    observed.config_map = objects.config_map(make_mpijob("pi").workers(2).obj(), [0, 1])
    plan = run(job, observed)
    assert created(plan) == ["Pod/pi-worker-2"]
    assert names.REPLACEMENT_LABEL not in plan.objects_to_create[0]["metadata"]["labels"], "a scale-up replaces nothing"
    assert [o["metadata"]["name"] for o in plan.objects_to_update] == ["pi-config"]
    assert "pi-worker-2" in plan.objects_to_update[0]["data"]["hostfile"]


@pytest.mark.parametrize(
    ("listed", "running", "updated"),
    [
        ([], [], False),
        ([0], [0], False),
        ([], [0], True),
        ([0, 1], [0], True),
        ([0], [0, 1], True),
    ],
    ids=["none-running", "same", "worker-started", "worker-stopped", "another-started"],
)
def test_config_map_updated_only_when_discover_hosts_changes(listed: list[int], running: list[int],
                                                             updated: bool) -> None:
    job = make_mpijob("pi").workers(2).obj()
    pods = [make_pod(job, "worker", i).running() if i in running else make_pod(job, "worker", i) for i in range(2)]
    observed = observe(job, [p.obj() for p in pods] + [make_pod(job, "launcher").obj()])
    observed.config_map = {"metadata": {"name": "pi-config", "resourceVersion": "7"},
                           "data": objects.config_map_data(job, listed)}
    plan = run(job, observed)
    assert bool(plan.objects_to_update) is updated
    if updated:
        data: dict[str, Any] = plan.objects_to_update[0]["data"]
        assert data == objects.config_map_data(job, running)
    assert plan.objects_to_create == []


@pytest.mark.parametrize(("cached_script", "written"),
                         [(None, True), ("fixed", False), ("live", True)],
                         ids=["first-pass", "fixed-script", "live-script-before"])
def test_discover_hosts_off_never_follows_the_workers(cached_script: str | None, written: bool) -> None:
    """--no-discover-hosts: the script is fixed, so workers starting make no ConfigMap write; a ConfigMap
    written with the live script (the operator ran with it before) gets the fixed one once."""
    job = make_mpijob("pi").workers(2).obj()
    pods = [make_pod(job, "worker", i).running().obj() for i in range(2)] + [make_pod(job, "launcher").obj()]
    observed = observe(job, pods)
    if cached_script is not None:
        data = objects.config_map_data(job, [0, 1], discover_hosts=cached_script == "live")
        observed.config_map = {"metadata": {"name": "pi-config", "resourceVersion": "7"}, "data": data}
    plan = Plan(status=job.status.model_copy(deep=True))
    ensure.supporting_objects(plan, job, observed, NO_PORTS, Settings(discover_hosts=False))
    writes = [o["data"] for o in plan.objects_to_create + plan.objects_to_update if o["kind"] == "ConfigMap"]
    assert writes == ([objects.config_map_data(job, [], discover_hosts=False)] if written else [])
    assert not writes or writes[0][names.DISCOVER_HOSTS_NAME] == hostfile.DISCOVER_HOSTS_OFF


def test_discover_hosts_off_script_fails_naming_the_flag(tmp_path: Path) -> None:
    script = tmp_path / names.DISCOVER_HOSTS_NAME
    script.write_text(hostfile.DISCOVER_HOSTS_OFF)
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert "--no-discover-hosts" in done.stderr and "--discover-hosts" in done.stderr


def test_terminating_worker_is_not_a_running_host() -> None:
    job = make_mpijob("pi").workers(1).obj()
    pod = make_pod(job, "worker", 0).running().terminating().obj()
    observed = observe(job, [pod, make_pod(job, "launcher").obj()])
    observed.config_map = objects.config_map(job, [0])
    plan = run(job, observed)
    assert plan.objects_to_update[0]["data"]["discover_hosts.sh"] == "#!/bin/sh\n"


def test_a_huge_job_is_planned_a_share_per_pass_and_its_launcher_with_the_last_share() -> None:
    job = make_mpijob("big").workers(1200).obj()
    first = Plan(status=job.status.model_copy(deep=True))
    ensure.job_pods(first, job, observe(job), launcher_may_start=True, ports=NO_PORTS)
    assert [o["metadata"]["name"] for o in first.objects_to_create][-1] == "big-worker-499"
    assert len(first.objects_to_create) == ensure.MAX_POD_CREATES_PER_PASS and first.requeue_after == 0
    made = [make_pod(job, "worker", i).obj() for i in range(1000)]
    last = Plan(status=job.status.model_copy(deep=True))
    ensure.job_pods(last, job, observe(job, made), launcher_may_start=True, ports=NO_PORTS)
    # The launcher comes with the last share: mpirun never starts before every worker is planned.
    assert [o["metadata"]["name"] for o in last.objects_to_create] == [
        *(f"big-worker-{i}" for i in range(1000, 1200)), "big-launcher"]
    assert last.requeue_after is None
