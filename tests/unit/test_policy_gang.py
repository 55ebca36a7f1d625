"""mpiop.policies.gang through decide(): the PodGroup's lifecycle, pods joining it, and why a gang waits."""

from __future__ import annotations

from typing import Any

from mpiop.decide import decide
from mpiop.desired import podgroup
from mpiop.desired.podgroup import GangScheduler
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from mpiop.policies import gang
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod, observe

PLUGINS = GangScheduler("scheduler-plugins-scheduler")
VOLCANO = GangScheduler("volcano")


def stored(job: Any, scheduler: GangScheduler = PLUGINS, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job's PodGroup as the cache would hold it."""
    group = podgroup.pod_group(job, scheduler)
    group["metadata"]["ownerReferences"] = [{"kind": "MPIJob", "name": job.metadata.name, "uid": job.metadata.uid,
                                             "controller": True}]
    group["status"] = status or {}
    return group


def with_group(observed: Observed, group: dict[str, Any] | None) -> Observed:
    observed.pod_groups = [group] if group is not None else []
    return observed


def pods_created(plan: Plan) -> list[dict[str, Any]]:
    return [o for o in plan.objects_to_create if o["kind"] == "Pod"]


def test_off_by_default_nothing_changes() -> None:
    job = make_mpijob("pi").workers(2).obj()
    plan = decide(job, observe(job), at(0))
    assert plan.pod_group is None
    assert all("schedulerName" not in p["spec"] for p in pods_created(plan))


def test_pod_group_first_and_every_pod_joins_it() -> None:
    job = make_mpijob("pi").workers(2).gpus(4).obj()
    plan = decide(job, observe(job), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None
    assert (plan.pod_group.verb, plan.pod_group.name) == ("create", "pi")
    assert plan.pod_group.body["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 0,
                                           "minResources": {"nvidia.com/gpu": "8"}}
    created = pods_created(plan)
    assert sorted(p["metadata"]["name"] for p in created) == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
    for pod in created:
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi"


def test_volcano_pods_carry_the_group_annotation() -> None:
    job = make_mpijob("pi").workers(1).obj()
    plan = decide(job, observe(job), at(0), Settings(gang_scheduler=VOLCANO))
    assert plan.pod_group is not None and plan.pod_group.body["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    for pod in pods_created(plan):
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "pi"


def test_unchanged_pod_group_is_left_alone_and_follows_worker_replicas() -> None:
    job = make_mpijob("pi").workers(2).obj()
    group = stored(job)
    plan = decide(job, with_group(observe(job), group), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is None
    scaled = make_mpijob("pi").workers(4).obj()
    plan = decide(scaled, with_group(observe(scaled), group), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None
    assert (plan.pod_group.verb, plan.pod_group.body) == ("patch", {"spec": {"minMember": 5}})


def test_suspended_job_has_no_pod_group_and_gets_it_back_on_resume() -> None:
    builder = make_mpijob("pi").workers(2).suspend().condition("Created")
    job = builder.obj()
    plan = decide(job, with_group(observe(job), stored(job)), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None and plan.pod_group.verb == "delete"
    assert pods_created(plan) == []
    plan = decide(job, observe(job), at(1), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is None

    resumed = builder.suspend(False).obj()
    plan = decide(resumed, observe(resumed), at(2), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None and plan.pod_group.verb == "create"
    assert len(pods_created(plan)) == 3


def test_finished_job_deletes_its_pod_group() -> None:
    # Finished under mpiop (it wrote the status): a job that finished under kubeflow's operator is left as it is.
    job = make_mpijob("pi").workers(1).condition("Created").condition("Succeeded").status(
        last_reconcile_time=at(0)).obj()
    plan = decide(job, with_group(observe(job), stored(job)), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None and plan.pod_group.verb == "delete"
    going = stored(job)
    going["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    assert decide(job, with_group(observe(job), going), at(0), Settings(gang_scheduler=PLUGINS)).pod_group is None


def test_a_job_succeeding_now_deletes_its_pod_group_in_the_same_pass() -> None:
    job = make_mpijob("pi").workers(1).condition("Created").status(start_time=at(0)).obj()
    pods = [make_pod(job, "launcher").succeeded().obj(), make_pod(job, "worker", 0).running().obj()]
    plan = decide(job, with_group(observe(job, pods), stored(job)), at(5), Settings(gang_scheduler=PLUGINS))
    assert plan.status.is_true("Succeeded")
    assert plan.pod_group is not None and plan.pod_group.verb == "delete"


def unschedulable_job() -> tuple[Any, list[dict[str, Any]]]:
    job = make_mpijob("pi", "ns").workers(2).gpus(8).condition("Created").status(start_time=at(0)).obj()
    message = "0/2 nodes are available: resource gap: nvidia.com/gpu 16."
    pods = [make_pod(job, "launcher").unschedulable(message).obj()] + [
        make_pod(job, "worker", i).unschedulable(message).obj() for i in range(2)]
    return job, pods


def test_a_gang_held_back_says_why_in_running_false_and_a_warning() -> None:
    job, pods = unschedulable_job()
    plan = decide(job, with_group(observe(job, pods), stored(job)), at(5), Settings(gang_scheduler=PLUGINS))
    running = plan.status.condition("Running")
    assert running is not None
    assert (running.status, running.reason) == ("False", "PodGroupUnschedulable")
    assert running.message == (
        "scheduler-plugins-scheduler has not scheduled PodGroup pi (minMember 3, minResources "
        "nvidia.com/gpu=16); 3 of 3 pods unschedulable, pi-launcher: 0/2 nodes are available: resource gap: "
        "nvidia.com/gpu 16.")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "PodGroupUnschedulable")]

    # The next pass, still held back: no new Event.
    again = job.model_copy(update={"status": plan.status})
    plan = decide(again, with_group(observe(again, pods), stored(job)), at(6), Settings(gang_scheduler=PLUGINS))
    assert plan.events == []

    # Placed: the gang's pods are bound and run; the condition this policy wrote goes.
    running_pods = [make_pod(job, "worker", i).running().obj() for i in range(2)]
    plan = decide(again, with_group(observe(again, running_pods), stored(job)), at(7), Settings(gang_scheduler=PLUGINS))
    assert plan.status.condition("Running") is None


def test_the_most_common_reason_of_the_pods_is_quoted() -> None:
    job, pods = unschedulable_job()
    pods[0] = make_pod(job, "launcher").unschedulable("cannot find enough sibling pods, current pods number: 1").obj()
    plan = decide(job, with_group(observe(job, pods), stored(job)), at(5), Settings(gang_scheduler=PLUGINS))
    running = plan.status.condition("Running")
    assert running is not None and running.message is not None
    assert running.message.endswith("3 of 3 pods unschedulable, pi-worker-0: 0/2 nodes are available: resource gap: "
                                    "nvidia.com/gpu 16.")


def test_volcano_unschedulable_condition_is_quoted() -> None:
    job, _ = unschedulable_job()
    status = {"phase": "Inqueue", "conditions": [{
        "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
        "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable"}]}
    plan = decide(job, with_group(observe(job, [make_pod(job, "launcher").obj()]), stored(job, VOLCANO, status)),
                  at(5), Settings(gang_scheduler=VOLCANO))
    running = plan.status.condition("Running")
    assert running is not None and running.message == (
        "volcano has not scheduled PodGroup pi (minMember 3, minResources nvidia.com/gpu=16, queue default), "
        "phase Inqueue: 3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable")


def test_pods_waiting_for_the_scheduler_are_not_reported() -> None:
    job, _ = unschedulable_job()
    pending = [make_pod(job, "worker", i).obj() for i in range(2)]
    plan = decide(job, with_group(observe(job, pending), stored(job)), at(5), Settings(gang_scheduler=PLUGINS))
    assert plan.status.condition("Running") is None
    assert gang.why_unscheduled(job, observe(job, pending), stored(job), PLUGINS, 0, at(5)) is None


def test_a_volcano_pod_group_its_queue_does_not_admit_is_reported_after_a_grace() -> None:
    job, _ = unschedulable_job()
    group = stored(job, VOLCANO, {"phase": "Pending"})
    group["metadata"]["creationTimestamp"] = "2024-05-01T12:00:00Z"  # at(0)
    pending = [make_pod(job, "launcher").obj()]
    early = decide(job, with_group(observe(job, pending), group), at(4), Settings(gang_scheduler=VOLCANO))
    assert early.status.condition("Running") is None and early.requeue_after == 6
    late = decide(job, with_group(observe(job, pending), group), at(12), Settings(gang_scheduler=VOLCANO))
    running = late.status.condition("Running")
    assert running is not None and running.reason == "PodGroupUnschedulable"
    assert running.message is not None and running.message.endswith(
        "phase Pending: not admitted by queue default after 10s")


def test_lowered_min_available_is_warned_about_on_create() -> None:
    job = make_mpijob("pi").workers(2).wait_for_workers_ready().scheduling_policy(minAvailable=3).obj()
    plan = decide(job, observe(job), at(0), Settings(gang_scheduler=PLUGINS))
    assert plan.pod_group is not None and plan.pod_group.body["spec"]["minMember"] == 2
    assert ("Warning", "MinAvailableLowered") in [(e.type, e.reason) for e in plan.events]


def test_a_quantity_that_is_none_fails_the_job_without_pods() -> None:
    job = make_mpijob("pi").scheduling_policy(minResources={"cpu": "lots"}).obj()
    plan = decide(job, observe(job), at(0), Settings(gang_scheduler=PLUGINS))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert "spec.runPolicy.schedulingPolicy.minResources[cpu]" in (failed.message or "")
    assert plan.pod_group is None and pods_created(plan) == []
