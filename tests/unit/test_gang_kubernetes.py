"""`--gang-scheduling kubernetes`: the scheduling.k8s.io/v1beta1 PodGroup a job's attempt wants, what its pods carry,
and policies/gang's life of it through decide() (one per attempt, the old one deleted, why a gang waits)."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import LAUNCHER, WORKER
from mpiop.controller import acceptance, trims
from mpiop.decide import decide
from mpiop.desired import podgroup
from mpiop.desired.podgroup import GangScheduler, gang_scheduler
from mpiop.desired.settings import Settings
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod, observe

KUBERNETES = GangScheduler("kubernetes")
SETTINGS = Settings(gang_scheduler=KUBERNETES)
ALL: dict[str, Any] = {"all": {}}


def gang(min_count: int, priority: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}, "disruptionMode": ALL}
    return spec | ({"priorityClassName": priority} if priority else {})


def test_the_flag_names_the_kubernetes_api() -> None:
    scheduler = gang_scheduler(" kubernetes ")
    assert scheduler == KUBERNETES and scheduler.kubernetes and not scheduler.volcano
    assert (scheduler.api_version, scheduler.spec_fields) == ("scheduling.k8s.io/v1beta1", ("schedulingPolicy",))
    assert not GangScheduler("volcano").kubernetes and not GangScheduler("scheduler-plugins-scheduler").kubernetes


@pytest.mark.parametrize(("name", "job", "spec"), [
    ("every worker and the launcher", make_mpijob("t").workers(4).gpus(4), gang(5)),
    ("WaitForWorkersReady: the launcher comes once the gang runs", make_mpijob("t").workers(4).wait_for_workers_ready(),
     gang(4)),
    ("runLauncherAsWorker: the launcher is rank 0, one more pod", make_mpijob("t").workers(2).launcher_as_worker(),
     gang(3)),
    ("no workers: the launcher alone", make_mpijob("t").workers(0), gang(1)),
    ("minAvailable taken as given", make_mpijob("t").workers(8).scheduling_policy(minAvailable=3), gang(3)),
    ("minAvailable 0: at least 1, as the API requires", make_mpijob("t").workers(2).scheduling_policy(minAvailable=0),
     gang(1)),
    ("one class on both templates", make_mpijob("t").workers(1).pod_spec(LAUNCHER, priorityClassName="high")
     .pod_spec(WORKER, priorityClassName="high"), gang(2, "high")),
    ("the policy's class, the pods' too", make_mpijob("t").workers(1).pod_spec(LAUNCHER, priorityClassName="high")
     .pod_spec(WORKER, priorityClassName="high").scheduling_policy(priorityClass="high"), gang(2, "high")),
    ("no minResources, queue or timeout: the API has none", make_mpijob("t").workers(1).request(WORKER, "cpu", "2")
     .scheduling_policy(queue="q", scheduleTimeoutSeconds=100, minResources={"cpu": "1"}), gang(2)),
])
def test_the_attempts_pod_group(name: str, job: MPIJobBuilder, spec: dict[str, Any]) -> None:
    built = job.obj()
    group = podgroup.pod_group(built, KUBERNETES, 3)
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert group["metadata"]["name"] == "t-3"
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("MPIJob", "t", True)
    assert group["spec"] == spec


@pytest.mark.parametrize(("name", "job", "says"), [
    ("launcher and workers of two classes", make_mpijob("t").workers(1).pod_spec(LAUNCHER, priorityClassName="high")
     .pod_spec(WORKER, priorityClassName="low"), "the templates have Launcher 'high' and Worker 'low'"),
    ("one class and none", make_mpijob("t").workers(1).pod_spec(WORKER, priorityClassName="low"),
     "priorityClassName: the templates have Launcher '' and Worker 'low'"),
    ("two schedulers", make_mpijob("t").workers(1).pod_spec(WORKER, schedulerName="other"),
     "schedulerName: the templates have Launcher 'default-scheduler' and Worker 'other'"),
    ("the policy's class, not the pods'", make_mpijob("t").workers(1).scheduling_policy(priorityClass="high"),
     "schedulingPolicy.priorityClass 'high' is not the pods' priorityClassName ('')"),
])
def test_pods_the_scheduler_would_fail_as_one_group_are_refused(name: str, job: MPIJobBuilder, says: str) -> None:
    with pytest.raises(ValueError, match="kubernetes") as raised:
        podgroup.pod_group(job.obj(), KUBERNETES)
    assert says in str(raised.value)


def test_no_workers_to_make_leaves_the_workers_class_out() -> None:
    job = make_mpijob("t").workers(0).pod_spec(LAUNCHER, priorityClassName="high").pod_spec(WORKER,
                                                                                            priorityClassName="low")
    assert podgroup.pod_group(job.obj(), KUBERNETES)["spec"] == gang(1, "high")


@pytest.mark.parametrize(("attempt", "group"), [(0, "pi-0"), (1, "pi-1"), (12, "pi-12")])
def test_a_pod_joins_its_attempts_group_and_keeps_its_scheduler(attempt: int, group: str) -> None:
    job = make_mpijob("pi").obj()
    pod: dict[str, Any] = {"metadata": {"labels": {"a": "b"}}, "spec": {"schedulerName": "my-scheduler"}}
    podgroup.join_pod(pod, job, KUBERNETES, attempt)
    assert pod == {"metadata": {"labels": {"a": "b"}},
                   "spec": {"schedulerName": "my-scheduler", "schedulingGroup": {"podGroupName": group}}}


def stored(job: Any, attempt: int = 0, status: dict[str, Any] | None = None, going: bool = False) -> dict[str, Any]:
    """The attempt's PodGroup as the cache holds it."""
    group = podgroup.pod_group(job, KUBERNETES, attempt)
    group["metadata"]["ownerReferences"] = [{"kind": "MPIJob", "name": job.metadata.name, "uid": job.metadata.uid,
                                             "controller": True}]
    group["status"] = status or {}
    if going:
        group["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return group


def with_groups(observed: Observed, *groups: dict[str, Any]) -> Observed:
    observed.pod_groups = list(groups)
    return observed


def pods_created(plan: Plan) -> list[dict[str, Any]]:
    return [o for o in plan.objects_to_create if o["kind"] == "Pod"]


def test_the_group_first_then_pods_that_join_it_and_never_the_templates() -> None:
    job = make_mpijob("pi").workers(2).gpus(4).obj()
    plan = decide(job, observe(job), at(0), SETTINGS)
    assert plan.pod_group is not None
    assert (plan.pod_group.verb, plan.pod_group.name, plan.pod_group.body["spec"]) == ("create", "pi-0", gang(3))
    created = pods_created(plan)
    assert sorted(p["metadata"]["name"] for p in created) == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
    for pod in created:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "pi-0"}
        assert "schedulerName" not in pod["spec"]  # the default scheduler's, as the template says
        assert pod["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") is None
    for replica in job.spec.mpi_replica_specs.values():
        assert "schedulingGroup" not in (replica.template.get("spec") or {})


def test_min_count_follows_worker_replicas_and_nothing_else_is_patched() -> None:
    job = make_mpijob("pi").workers(2).obj()
    assert decide(job, with_groups(observe(job), stored(job)), at(0), SETTINGS).pod_group is None
    scaled = make_mpijob("pi").workers(4).obj()
    plan = decide(scaled, with_groups(observe(scaled), stored(job)), at(0), SETTINGS)
    assert plan.pod_group is not None
    assert (plan.pod_group.verb, plan.pod_group.body) == ("patch", {"spec": {"schedulingPolicy": {"gang": {
        "minCount": 5}}}})


def test_a_new_attempt_gets_a_new_group_and_the_old_one_is_deleted() -> None:
    job = make_mpijob("pi").workers(1).condition("Created").status(restart_count=1, start_time=at(0)).obj()
    plan = decide(job, with_groups(observe(job), stored(job, 0)), at(1), SETTINGS)
    assert plan.pod_group is not None and (plan.pod_group.verb, plan.pod_group.name) == ("create", "pi-1")
    assert plan.stale_pod_groups == ["pi-0"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods_created(plan)} == {"pi-1"}
    # One being deleted is not deleted again; the current one is kept.
    plan = decide(job, with_groups(observe(job), stored(job, 0, going=True), stored(job, 1)), at(2), SETTINGS)
    assert plan.pod_group is None and plan.stale_pod_groups == []


def test_only_the_jobs_attempt_names_are_stale() -> None:
    job = make_mpijob("pi").workers(1).condition("Created").status(restart_count=2, start_time=at(0)).obj()
    other = stored(job, 2)
    other["metadata"]["name"] = "pi"  # controlled by the job, but no attempt's name
    plan = decide(job, with_groups(observe(job), stored(job, 0), stored(job, 1), stored(job, 2), other), at(1),
                  SETTINGS)
    assert plan.stale_pod_groups == ["pi-0", "pi-1"]


def test_suspended_every_group_goes_and_on_resume_pods_wait_for_the_old_one_to_be_gone() -> None:
    builder = make_mpijob("pi").workers(2).suspend().condition("Created")
    job = builder.obj()
    plan = decide(job, with_groups(observe(job), stored(job)), at(0), SETTINGS)
    assert plan.pod_group is not None and (plan.pod_group.verb, plan.pod_group.name) == ("delete", "pi-0")
    assert pods_created(plan) == []

    resumed = builder.suspend(False).obj()
    # Its pods are gone but its finalizer still holds it: the same attempt's pods would join it for good.
    plan = decide(resumed, with_groups(observe(resumed), stored(job, going=True)), at(2), SETTINGS)
    assert plan.pod_group is None and pods_created(plan) == []
    plan = decide(resumed, observe(resumed), at(3), SETTINGS)
    assert plan.pod_group is not None and plan.pod_group.verb == "create"
    assert len(pods_created(plan)) == 3


def test_a_finished_job_deletes_its_groups() -> None:
    job = make_mpijob("pi").workers(1).condition("Created").condition("Succeeded").status(
        last_reconcile_time=at(0), restart_count=1).obj()
    plan = decide(job, with_groups(observe(job), stored(job, 0), stored(job, 1)), at(0), SETTINGS)
    assert plan.pod_group is not None and (plan.pod_group.verb, plan.pod_group.name) == ("delete", "pi-1")
    assert plan.stale_pod_groups == ["pi-0"]


def test_pods_of_two_classes_fail_the_job_before_any_pod() -> None:
    job = make_mpijob("pi").workers(1).pod_spec(LAUNCHER, priorityClassName="high").obj()
    plan = decide(job, observe(job), at(0), SETTINGS)
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message == ("MPIJob default/pi has failed: --gang-scheduling kubernetes places the launcher and "
                              "workers as one PodGroup, whose pods must have one priorityClassName: the templates "
                              "have Launcher 'high' and Worker ''")
    assert plan.pod_group is None and pods_created(plan) == []


UNSCHEDULABLE = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, pod group preemption: No "
                            "preemption victims found for incoming preemptor"}


@pytest.mark.parametrize(("name", "conditions", "pods_say", "want"), [
    ("the group's condition, once", [UNSCHEDULABLE], "pod group is unschedulable, minCount (3) cannot be satisfied",
     "kubernetes has not scheduled PodGroup pi-0 (minCount 3): Unschedulable: minCount (3) cannot be satisfied: 2 "
     "scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor"),
    ("a scheduler error", [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "SchedulerError",
                            "message": "all pods in a single pod group should have the same priority"}], "",
     "kubernetes has not scheduled PodGroup pi-0 (minCount 3): SchedulerError: all pods in a single pod group should "
     "have the same priority"),
    ("no condition yet: the pods' word", [], "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
     "kubernetes has not scheduled PodGroup pi-0 (minCount 3); 3 of 3 pods unschedulable, pi-launcher: 0/2 nodes "
     "are available: 2 Insufficient nvidia.com/gpu."),
    ("placed", [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": ""}], "",
     None),
    ("nothing said: the pods wait for their group's quorum", [], "", None),
])
def test_why_a_gang_waits(name: str, conditions: list[dict[str, Any]], pods_say: str, want: str | None) -> None:
    job = make_mpijob("pi", "ns").workers(2).gpus(8).condition("Created").status(start_time=at(0)).obj()
    pods = [make_pod(job, "launcher"), *(make_pod(job, "worker", i) for i in range(2))]
    pods = [p.unschedulable(pods_say) if pods_say else p for p in pods]
    observed = with_groups(observe(job, [p.obj() for p in pods]), stored(job, status={"conditions": conditions}))
    plan = decide(job, observed, at(5), SETTINGS)
    running = plan.status.condition("Running")
    if want is None:
        assert running is None and plan.events == []
        return
    assert running is not None and (running.status, running.reason, running.message) == (
        "False", "PodGroupUnschedulable", want)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "PodGroupUnschedulable", want)]


def test_the_cache_keeps_of_a_group_what_decisions_read() -> None:
    job = make_mpijob("pi").workers(1).obj()
    group = podgroup.pod_group(job, KUBERNETES)  # as made, its owner reference whole
    group["status"] = {"conditions": [
        {**UNSCHEDULABLE, "message": "x" * 5000, "lastTransitionTime": "2024-05-01T12:00:00Z"},
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "y"}]}
    group["spec"] |= {"priority": 0, "resourceClaims": [{"name": "c", "resourceClaimName": "claim"}]}
    trimmed = trims.trim_pod_group(group)
    assert trimmed["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}  # the one field compared
    assert trimmed["status"]["conditions"] == [{**{k: v for k, v in UNSCHEDULABLE.items() if k != "message"},
                                                "message": "x" * MESSAGE_LIMIT}]
    assert acceptance.accepts("PodGroup")(trimmed)
