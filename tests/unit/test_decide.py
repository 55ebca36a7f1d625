"""mpiop.decide end to end: whole job lifetimes, one reconcile at a time, against a simulated cluster.

`World` plays the apiserver and kubelet: it carries out each Plan (status written, objects created, pods
deleted: marked terminating until `gone()`), and the test moves pods through their phases by hand.
"""

from __future__ import annotations

import copy

from mpiop import names, podstate
from mpiop.controller.trims import trim_pod
from mpiop.decide import decide
from mpiop.plan import Observed
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod
from testkit.world import World, names_of, running


def test_fresh_running_succeeded_cleanup_ttl() -> None:
    world = World(make_mpijob("pi", "ns").workers(2).ttl(60).obj(), cluster_domain="cluster.local")

    plan = world.reconcile(0)
    assert plan.create_ssh_secret
    assert names_of(plan.objects_to_create) == ["Service/pi", "ConfigMap/pi-config", "Pod/pi-worker-0",
                                     "Pod/pi-worker-1", "Pod/pi-launcher"]
    assert world.config_map is not None
    assert world.config_map["data"]["hostfile"] == (
        "pi-worker-0.pi.ns.svc.cluster.local slots=1\npi-worker-1.pi.ns.svc.cluster.local slots=1\n")
    assert world.conditions == ["Created=True"]
    assert world.job.status.start_time == at(0)
    assert [e.reason for e in plan.events] == ["MPIJobCreated"]
    worker_counts = world.job.status.replica_statuses["Worker"]
    assert (worker_counts.active, worker_counts.ready) == (2, 0), "the planned pods count: no second write"

    plan = world.reconcile(1)
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete, plan.events) == ([], [], [], [])
    assert world.job.status.replica_statuses["Worker"].active == 2

    world.set_all(running)
    plan = world.reconcile(2)
    assert world.state == "Running"
    assert [e.reason for e in plan.events] == ["MPIJobRunning"]
    assert names_of(plan.objects_to_update) == ["ConfigMap/pi-config"]
    assert world.config_map["data"]["discover_hosts.sh"] == (
        "#!/bin/sh\necho pi-worker-0.pi.ns.svc.cluster.local:1\necho pi-worker-1.pi.ns.svc.cluster.local:1\n")

    plan = world.reconcile(3)
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete, plan.events) == ([], [], [], [])

    world.set("pi-launcher", lambda b: b.succeeded())
    plan = world.reconcile(10)
    assert world.conditions == ["Created=True", "Running=False", "Succeeded=True"]
    assert world.job.status.completion_time == at(10)
    assert [e.reason for e in plan.events] == ["MPIJobSucceeded"]
    assert names_of(plan.pods_to_delete) == ["pi-worker-0", "pi-worker-1"], "cleanPodPolicy Running (the default)"
    assert plan.requeue_after == 60
    assert plan.objects_to_create == []
    assert world.job.status.replica_statuses["Launcher"].succeeded == 1
    assert world.job.status.replica_statuses["Worker"].active == 0, "the planned deletions count already"

    world.gone()
    plan = world.reconcile(20)
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], [])
    assert plan.requeue_after == 50
    assert not plan.delete_mpijob
    assert world.live_pods() == {"pi-launcher": 0}

    plan = world.reconcile(70)
    assert plan.delete_mpijob
    assert world.state == "Succeeded"


def test_failure_restart_running_failure_failed() -> None:
    world = World(make_mpijob("pi", "ns").workers(2).backoff_limit(1).obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    assert world.state == "Running"

    world.set("pi-worker-1", lambda b: b.failed(reason="OOMKilled", exit_code=137))
    plan = world.reconcile(5)
    assert world.job.status.restart_count == 1
    assert world.conditions == ["Created=True", "Running=False", "Restarting=True"]
    message = ("MPIJob ns/pi is restarting (restart 1 of backoffLimit 1): "
               "pi-worker-1 (rank 1) container main OOMKilled exit 137; the attempt's logs are kept in ConfigMap "
               "pi-attempt-0")
    assert [(e.type, e.message) for e in plan.events] == [("Warning", message)]
    assert sorted(names_of(plan.pods_to_delete)) == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
    assert plan.objects_to_create == []

    # The old attempt's pods are going; the OOMKilled one is seen again and not counted twice.
    plan = world.reconcile(6)
    assert world.job.status.restart_count == 1
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], [])

    world.gone()
    plan = world.reconcile(7)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-0", "Pod/pi-worker-1", "Pod/pi-launcher-1"]
    assert world.live_pods() == {"pi-launcher-1": 1, "pi-worker-0": 1, "pi-worker-1": 1}

    world.set_all(running)
    world.reconcile(8)
    assert world.conditions == ["Created=True", "Restarting=False", "Running=True"]
    assert not world.job.status.is_true("Restarting")

    world.set("pi-launcher-1", lambda b: b.failed(exit_code=1))
    plan = world.reconcile(9)
    assert world.state == "Failed"
    failed = world.job.status.condition("Failed")
    assert failed is not None
    assert failed.message == ("MPIJob ns/pi has failed (backoffLimit 1 reached after 1 restarts): "
                              "pi-launcher-1 container main Error exit 1; the attempt's logs are kept in ConfigMap "
                              "pi-attempt-1")
    assert world.job.status.completion_time == at(9)
    assert world.job.status.restart_count == 1
    assert names_of(plan.pods_to_delete) == ["pi-worker-0", "pi-worker-1"], "the failed launcher stays for its log"
    assert [e.reason for e in plan.events] == ["MPIJobFailed"]

    world.gone()
    plan = world.reconcile(10)
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], [])
    assert world.state == "Failed"
    assert world.job.status.replica_statuses["Launcher"].failed == 1


def test_conditions_after_a_restart_and_recovery() -> None:
    world = World(make_mpijob("pi").workers(1).obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    world.set("pi-worker-0", lambda b: b.evicted())
    world.reconcile(2)
    world.gone()
    world.reconcile(3)
    world.set_all(running)
    world.reconcile(4)
    assert world.conditions == ["Created=True", "Restarting=False", "Running=True"]
    running_condition = world.job.status.condition("Running")
    assert running_condition is not None
    assert running_condition.last_transition_time == at(4)


def test_exit_code_permanent_fails_at_once() -> None:
    world = World(make_mpijob("pi").workers(1).restart_policy("Worker", "ExitCode").clean_pod_policy("All").obj())
    world.reconcile(0)
    assert world.pods["pi-worker-0"]["metadata"]["labels"]["mpiop.kubeflow.org/attempt"] == "0"
    world.set_all(running)
    world.reconcile(1)
    world.set("pi-worker-0", lambda b: b.failed(exit_code=2))
    plan = world.reconcile(2)
    assert world.state == "Failed"
    assert world.job.status.restart_count is None
    assert sorted(names_of(plan.pods_to_delete)) == ["pi-launcher", "pi-worker-0"], "cleanPodPolicy All"


def test_exit_code_retryable_restarts() -> None:
    world = World(make_mpijob("pi").workers(1).restart_policy("Worker", "ExitCode").obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    world.set("pi-worker-0", lambda b: b.failed(exit_code=137))
    world.reconcile(2)
    assert world.state == "Restarting"
    assert world.job.status.restart_count == 1


def test_wait_for_workers_ready() -> None:
    world = World(make_mpijob("pi").workers(2).wait_for_workers_ready().obj())
    plan = world.reconcile(0)
    assert names_of(plan.objects_to_create)[-2:] == ["Pod/pi-worker-0", "Pod/pi-worker-1"]
    world.set_all(running)
    plan = world.reconcile(1)
    assert plan.objects_to_create == []
    world.set("pi-worker-0", lambda b: b.ready())
    assert world.reconcile(2).objects_to_create == []
    world.set("pi-worker-1", lambda b: b.ready())
    plan = world.reconcile(3)
    assert names_of(plan.objects_to_create) == ["Pod/pi-launcher"]
    assert world.state == "Created"
    world.set("pi-launcher", running)
    world.reconcile(4)
    assert world.state == "Running"


def test_suspend_and_resume() -> None:
    world = World(make_mpijob("pi", "ns").workers(1).suspend().deadline(100).obj())
    plan = world.reconcile(0)
    assert world.conditions == ["Created=True", "Suspended=True"]
    # The supporting objects are made while suspended (as kubeflow does); no pod is.
    assert names_of(plan.objects_to_create) == ["Service/pi", "ConfigMap/pi-config"]
    assert plan.create_ssh_secret
    assert world.job.status.start_time is None
    assert plan.requeue_after is None, "no deadline runs while suspended"

    world.job.spec.run_policy.suspend = False
    plan = world.reconcile(5)
    assert world.conditions == ["Suspended=False", "Created=True"]
    assert world.job.status.start_time == at(5)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-0", "Pod/pi-launcher"]
    assert plan.requeue_after == 100
    world.set_all(running)
    world.reconcile(6)
    assert world.state == "Running"

    world.job.spec.run_policy.suspend = True
    plan = world.reconcile(10)
    assert world.conditions == ["Created=True", "Running=False", "Suspended=True"]
    assert sorted(names_of(plan.pods_to_delete)) == ["pi-launcher", "pi-worker-0"]
    assert world.job.status.start_time is None

    # Killed on their way out, the pods go Failed before they are gone; then the job is resumed.
    world.set_all(lambda b: b.failed(exit_code=137))
    world.job.spec.run_policy.suspend = False
    plan = world.reconcile(20)
    assert world.job.status.restart_count is None, "pods deleted by a suspend are not failures"
    assert world.state == "Created"
    assert plan.objects_to_create == [], "not before the old pods are gone"
    assert world.job.status.start_time is None, "the resumed attempt starts (its deadline too) once they are"

    world.gone()
    plan = world.reconcile(21)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-0", "Pod/pi-launcher"]
    assert world.job.status.start_time == at(21)
    world.set_all(running)
    world.reconcile(22)
    assert world.state == "Running"
    assert world.job.status.restart_count is None


def test_deadline_exceeded() -> None:
    world = World(make_mpijob("pi", "ns").workers(1).deadline(30).obj())
    assert world.reconcile(0).requeue_after == 30
    world.set_all(running)
    assert world.reconcile(10).requeue_after == 20
    plan = world.reconcile(30)
    assert world.state == "Failed"
    failed = world.job.status.condition("Failed")
    assert failed is not None
    assert failed.reason == "DeadlineExceeded"
    assert sorted(names_of(plan.pods_to_delete)) == ["pi-launcher", "pi-worker-0"]
    assert world.job.status.completion_time == at(30)


def test_scale_down_while_running_is_not_a_failure() -> None:
    world = World(make_mpijob("pi", "ns").workers(3).obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    world.job.spec.mpi_replica_specs["Worker"].replicas = 2
    plan = world.reconcile(2)
    assert names_of(plan.pods_to_delete) == ["pi-worker-2"]
    assert names_of(plan.objects_to_update) == ["ConfigMap/pi-config"]
    assert "pi-worker-2" not in plan.objects_to_update[0]["data"]["hostfile"]
    assert "pi-worker-2" not in plan.objects_to_update[0]["data"]["discover_hosts.sh"]

    world.set("pi-worker-2", lambda b: b.failed(exit_code=255))
    plan = world.reconcile(3)
    assert world.job.status.restart_count is None
    assert world.state == "Running"
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], [])

    world.gone()
    plan = world.reconcile(4)
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete) == ([], [], [])
    assert world.live_pods() == {"pi-launcher": 0, "pi-worker-0": 0, "pi-worker-1": 0}


def test_worker_deleted_then_launcher_exits_0_restarts_then_succeeds() -> None:
    """Open MPI 5.0.7's prterun exited 0 after losing a worker someone deleted: not a success, a restart."""
    world = World(make_mpijob("pi", "ns").workers(2).obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    assert world.state == "Running"

    deleted = podstate.marked_terminating(world.pods["pi-worker-1"], "2026-01-01T00:00:02Z")  # kubectl delete
    world.pods["pi-worker-1"] = trim_pod(deleted)
    plan = world.reconcile(2)
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], []), (
        "mpirun's to notice while it runs")
    assert world.state == "Running"

    world.set("pi-launcher", lambda b: b.succeeded())
    plan = world.reconcile(3)
    assert world.conditions == ["Created=True", "Running=False", "Restarting=True"]
    assert [e.message for e in plan.events] == [
        "MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): worker pi-worker-1 (rank 1) was deleted "
        "while the launcher ran; the launcher pi-launcher exited 0 without all its ranks; "
        "the attempt's logs are kept in ConfigMap pi-attempt-0"]
    assert world.job.status.last_failure is not None
    assert (world.job.status.last_failure.pod, world.job.status.last_failure.reason) == ("pi-worker-1", "WorkerLost")
    assert sorted(names_of(plan.pods_to_delete)) == ["pi-launcher", "pi-worker-0"]

    world.gone()
    plan = world.reconcile(4)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-0", "Pod/pi-worker-1", "Pod/pi-launcher-1"]
    world.set_all(running)
    world.reconcile(5)
    world.set("pi-launcher-1", lambda b: b.succeeded())
    plan = world.reconcile(6)
    assert world.state == "Succeeded"
    assert names_of(plan.pods_to_delete) == ["pi-worker-0", "pi-worker-1"], (
        "cleanPodPolicy's deletions come after success")
    plan = world.reconcile(7)
    assert (world.state, world.job.status.restart_count) == ("Succeeded", 1)
    assert (plan.objects_to_create, plan.pods_to_delete, plan.events) == ([], [], [])


def test_worker_deleted_and_made_again_before_the_launcher_exits_0_restarts() -> None:
    """The deleted worker is gone and made again by mpiop before prterun exits 0: still no success."""
    world = World(make_mpijob("pi", "ns").workers(2).obj())
    world.reconcile(0)
    world.set_all(running)
    world.reconcile(1)
    assert names.REPLACEMENT_LABEL not in podstate.labels(world.pods["pi-worker-1"])

    del world.pods["pi-worker-1"]  # deleted by someone, already gone
    plan = world.reconcile(2)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-1"]
    launcher_uid = world.pods["pi-launcher"]["metadata"]["uid"]
    assert podstate.labels(world.pods["pi-worker-1"])[names.REPLACEMENT_LABEL] == launcher_uid
    world.set("pi-worker-1", running)

    world.set("pi-launcher", lambda b: b.succeeded())
    plan = world.reconcile(3)
    assert world.state == "Restarting"
    assert [e.message for e in plan.events] == [
        "MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): worker pi-worker-1 (rank 1) was made again "
        "(its predecessor lost) while the launcher ran; the launcher pi-launcher exited 0 without all its ranks; "
        "the attempt's logs are kept in ConfigMap pi-attempt-0"]


def test_finished_job_makes_nothing() -> None:
    job = (make_mpijob("pi").workers(2).clean_pod_policy("None")
           .condition("Created").condition("Succeeded").status(completion_time=at(0)).obj())
    plan = decide(job, Observed(), at(5))
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete, plan.create_ssh_secret,
            plan.events) == ([], [], [], False, [])
    assert plan.status.conditions == job.status.conditions
    assert plan.requeue_after is None


def test_decide_does_not_change_its_input() -> None:
    job = make_mpijob("pi").workers(1).obj()
    observed = Observed(pods=[make_pod(job, "worker", 0).failed().obj()])
    before_job, before_pods = job.model_dump(), copy.deepcopy(observed.pods)
    plan = decide(job, observed, at(0))
    assert plan.status.restart_count == 1
    assert job.model_dump() == before_job
    assert observed.pods == before_pods
