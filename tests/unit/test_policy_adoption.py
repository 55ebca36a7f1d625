"""mpiop.policies.adoption: jobs kubeflow/mpi-operator v0.8.2 started, from what it really left (testkit/fixtures)."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from mpiop import podstate
from mpiop.api.v2beta1 import CleanPodPolicy, MPIJob
from mpiop.decide import decide
from mpiop.desired.hostnetwork import PortRange
from mpiop.desired.settings import Settings
from mpiop.names import SSH_PORT_LABEL
from mpiop.plan import Observed, Plan
from mpiop.policies import adoption
from testkit.kubeflow import as_cached
from testkit.mpijobs import at

NOW = at(0)


def conditions(plan: Plan) -> list[str]:
    return [f"{c.type}={c.status}" for c in plan.status.conditions]


def deleted(plan: Plan) -> list[str]:
    return sorted(podstate.name(p) for p in plan.pods_to_delete)


def nothing_made(plan: Plan) -> bool:
    return plan.objects_to_create == [] and not plan.create_ssh_secret


def with_finished_launcher(job: MPIJob, observed: Observed, moment: str = "kf-pi-ok.2-finished") -> Observed:
    """The launcher Job and its pod as they were at `moment` (kubeflow's operator stopped before it saw it)."""
    _, later = as_cached(moment)
    return Observed(pods=observed.pods, config_map=observed.config_map, secret=observed.secret,
                    service=observed.service, launcher_batch_job=later.launcher_batch_job,
                    launcher_batch_job_pods=later.launcher_batch_job_pods)


def test_a_running_kubeflow_job_runs_on_untouched() -> None:
    job, observed = as_cached("kf-pi-ok.1-running")
    plan = decide(job, observed, NOW)
    assert nothing_made(plan) and plan.pods_to_delete == [] and plan.launcher_batch_job_to_delete is None
    # kubeflow's conditions are continued as they are, reasons and times included.
    assert plan.status.conditions == job.status.conditions
    assert [(c.type, c.reason) for c in plan.status.conditions] == [
        ("Created", "MPIJobCreated"), ("Running", "MPIJobRunning")]
    assert plan.status.start_time == job.status.start_time
    assert [e.reason for e in plan.events] == ["MPIJobAdopted"]
    assert "pi-launcher" in plan.events[0].message
    launcher = plan.status.replica_statuses["Launcher"]
    assert (launcher.active, launcher.ready) == (1, 1)
    assert plan.status.replica_statuses["Worker"].active == 2


def test_a_kubeflow_job_just_created_gets_no_second_launcher() -> None:
    job, observed = as_cached("kf-pi-ok.0-created")
    plan = decide(job, observed, NOW)
    assert nothing_made(plan) and plan.pods_to_delete == []
    assert not plan.status.is_true("Running")


def test_the_launcher_batch_jobs_success_is_the_jobs_success() -> None:
    job, observed = as_cached("kf-pi-ok.1-running")
    plan = decide(job, with_finished_launcher(job, observed), NOW)
    assert conditions(plan) == ["Created=True", "Running=False", "Succeeded=True"]
    assert plan.status.completion_time == NOW
    assert plan.status.replica_statuses["Launcher"].succeeded == 1
    # cleanPodPolicy Running: the workers go; the Job (its pod done, its log readable) stays.
    assert deleted(plan) == ["pi-worker-0", "pi-worker-1"]
    assert plan.launcher_batch_job_to_delete is None
    assert plan.requeue_after == 60  # ttlSecondsAfterFinished
    assert nothing_made(plan)


@pytest.mark.parametrize("moment", ["kf-pi-ok.2-finished"])
def test_a_job_kubeflow_finished_stays_as_it_is(moment: str) -> None:
    job, observed = as_cached(moment)
    assert job.status.completion_time is not None
    plan = decide(job, observed, job.status.completion_time + dt.timedelta(hours=1))  # long past its TTL
    assert plan.status == job.status
    assert (plan.objects_to_create, plan.objects_to_update, plan.pods_to_delete, plan.events) == ([], [], [], [])
    assert not plan.delete_mpijob and plan.launcher_batch_job_to_delete is None and plan.requeue_after is None


def test_a_failed_worker_restarts_the_job_and_retires_kubeflows_launcher() -> None:
    job, observed = as_cached("kf-pi-fail.2-finished")
    plan = decide(job, observed, NOW)
    assert plan.status.restart_count == 1
    assert conditions(plan) == ["Created=True", "Running=False", "Restarting=True"]
    restarting = plan.status.condition("Restarting")
    assert restarting is not None
    assert "pi-worker-0 (rank 0) container mpi-worker Error exit 1" in (restarting.message or "")
    assert deleted(plan) == ["pi-worker-0", "pi-worker-1"]
    assert plan.launcher_batch_job_to_delete is not None
    assert plan.launcher_batch_job_to_delete["metadata"]["name"] == "pi-launcher"
    assert nothing_made(plan)


def _restarted(observed: Observed, *, launcher_batch_job: bool, launcher_pods: bool, workers: bool) -> Observed:
    return Observed(pods=observed.pods if workers else [], config_map=observed.config_map, secret=observed.secret,
                    service=observed.service,
                    launcher_batch_job=observed.launcher_batch_job if launcher_batch_job else None,
                    launcher_batch_job_pods=observed.launcher_batch_job_pods if launcher_pods else [])


@pytest.mark.parametrize(
    ("launcher_batch_job", "launcher_pods", "workers", "retired", "made"),
    [
        (True, True, True, True, []),
        (False, True, True, False, []),
        (False, True, False, False, ["pi-worker-0", "pi-worker-1"]),
        (False, False, False, False, ["pi-worker-0", "pi-worker-1", "pi-launcher-1"]),  # attempt 1's launcher
    ],
    ids=["job-still-there", "its-pod-going", "workers-gone", "all-gone-own-launcher"],
)
def test_after_the_restart_mpiops_launcher_waits_for_kubeflows(launcher_batch_job: bool, launcher_pods: bool,
                                                               workers: bool, retired: bool, made: list[str]) -> None:
    job, observed = as_cached("kf-pi-fail.2-finished")
    restarted = job.model_copy(update={"status": decide(job, observed, NOW).status})
    restarted.status.last_reconcile_time = NOW
    plan = decide(restarted, _restarted(observed, launcher_batch_job=launcher_batch_job, launcher_pods=launcher_pods,
                                        workers=workers), at(1))
    assert (plan.launcher_batch_job_to_delete is not None) == retired
    assert [o["metadata"]["name"] for o in plan.objects_to_create] == made
    assert all(o["metadata"]["labels"]["mpiop.kubeflow.org/attempt"] == "1" for o in plan.objects_to_create)


def test_a_failed_launcher_batch_job_is_a_failed_attempt() -> None:
    job, observed = as_cached("kf-pi-ok.1-running")
    job.spec.run_policy.backoff_limit = 0
    failed_job = copy.deepcopy(observed.launcher_batch_job)
    assert failed_job is not None
    failed_job["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                           "message": "Job has reached the specified backoff limit"}]
    observed.launcher_batch_job = failed_job
    plan = decide(job, observed, NOW)
    assert conditions(plan) == ["Created=True", "Running=False", "Failed=True"]
    failed = plan.status.condition("Failed")
    assert failed is not None
    message = failed.message or ""
    assert "launcher Job pi-launcher BackoffLimitExceeded: Job has reached the specified backoff limit" in message
    assert "backoffLimit 0" in message
    # Failed: cleanPodPolicy Running deletes the running workers and the Job whose pod still runs.
    assert deleted(plan) == ["pi-worker-0", "pi-worker-1"]
    assert plan.launcher_batch_job_to_delete is failed_job


def test_suspending_an_adopted_job_deletes_kubeflows_launcher_too() -> None:
    job, observed = as_cached("kf-pi-ok.1-running")
    job.spec.run_policy.suspend = True
    plan = decide(job, observed, NOW)
    assert plan.status.is_true("Suspended")
    assert deleted(plan) == ["pi-worker-0", "pi-worker-1"]
    assert plan.launcher_batch_job_to_delete is not None


@pytest.mark.parametrize(
    ("policy", "moment", "retired"),
    [
        ("Running", "kf-pi-ok.2-finished", False), ("Running", "kf-pi-ok.1-running", True),
        ("All", "kf-pi-ok.2-finished", True), ("All", "kf-pi-ok.1-running", True),
        ("None", "kf-pi-ok.2-finished", False), ("None", "kf-pi-ok.1-running", False),
    ],
)
def test_clean_pod_policy_applies_to_the_launcher_batch_job(policy: CleanPodPolicy, moment: str, retired: bool) -> None:
    job, _ = as_cached("kf-pi-ok.1-running")
    _, observed = as_cached(moment)
    job.spec.run_policy.clean_pod_policy = policy
    plan = Plan(status=job.status)
    adoption.cleanup(plan, job, observed)
    assert (plan.launcher_batch_job_to_delete is not None) == retired


def test_a_launcher_batch_job_being_deleted_is_not_deleted_again() -> None:
    job, observed = as_cached("kf-pi-ok.1-running")
    assert observed.launcher_batch_job is not None
    observed.launcher_batch_job["metadata"]["deletionTimestamp"] = "2026-11-23T03:17:00Z"
    plan = Plan(status=job.status)
    adoption.retire(plan, observed)
    assert plan.launcher_batch_job_to_delete is None


def test_claiming_tests_the_owner_then_adds_our_labels_to_kubeflows() -> None:
    job, _ = as_cached("kf-pi-ok.1-running")
    assert adoption.claim_patch(job) == [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "eed619a3-a261-4e05-9bd3-a3329dd2630b"},
        {"op": "add", "path": "/metadata/labels/training.kubeflow.org~1operator-name", "value": "mpi-operator"},
        {"op": "add", "path": "/metadata/labels/training.kubeflow.org~1job-name", "value": "pi"},
        {"op": "add", "path": "/metadata/labels/app", "value": "pi"},
    ]


def test_jobs_mpiop_finished_are_still_its_own() -> None:
    job, observed = as_cached("kf-pi-ok.2-finished")
    job.status.last_reconcile_time = NOW  # mpiop wrote it: TTL applies
    assert not adoption.finished_under_kubeflow(job)
    assert job.status.completion_time is not None
    plan = decide(job, observed, job.status.completion_time + dt.timedelta(hours=1))
    assert plan.delete_mpijob


def test_an_adopted_jobs_host_network_worker_gets_its_port_from_the_operators_range() -> None:
    """A worker kubeflow's job lost is made again by mpiop, on the host network, with a port from
    --host-network-port-range (the flags reach the adoption policy whole)."""
    job, observed = as_cached("kf-pi-ok.1-running")
    worker = job.spec.mpi_replica_specs["Worker"].template
    worker["spec"]["hostNetwork"] = True
    observed.pods = [p for p in observed.pods if podstate.name(p) != "pi-worker-1"]
    plan = decide(job, observed, NOW, Settings(port_range=PortRange(40000, 40009)))
    made = [o for o in plan.objects_to_create if o["kind"] == "Pod"]
    assert [o["metadata"]["name"] for o in made] == ["pi-worker-1"]
    port = int(made[0]["metadata"]["labels"][SSH_PORT_LABEL])
    assert 40000 <= port <= 40009
