"""Workload-aware preemption of a Kubernetes gang (issue 62), for real: the stock v1.37 kube-scheduler (GenericWorkload
on: its GangScheduling plugin and PodGroup preemption) on a simulated cluster with room for one job.

Two KWOK nodes of 8 GPUs (testkit/gangs.py), PriorityClasses low and high of the test's own, and two MPIJobs of 4
workers x 4 GPUs under `--gang-scheduling kubernetes`: low runs whole, then high, of the same size, is created. The
scheduler finds no room for high's PodGroup and takes low's (disruptionMode all) as one victim: it puts DisruptionTarget
PreemptionByScheduler on every pod of it and deletes each with the pod's own terminationGracePeriodSeconds; KWOK, as
a kubelet, removes them at once, before mpiop's next pass. mpiop counts a disruption restart (not backoffLimit: low's
is 0), with no graceful stop to run (the scheduler deleted every pod itself, and KWOK removed them: low's stop grace
is not what the pods get), and makes the next attempt with its own PodGroup, which waits while high runs whole;
once high has finished, low's new attempt is placed whole and succeeds. The test prints what it saw, with the seconds.

With low's preempted launcher kept going (a finalizer of the test, as a kubelet's grace keeps mpirun), mpiop runs its
graceful stop on it: Stopping=True Disrupted, Checkpointing, no pod of the next attempt until it is gone, then
Stopping=False LauncherEnded.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from devcluster.simulated import FINISH_LABEL, SimulatedCluster
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.controller.caches import pod_group_resource
from mpiop.desired.podgroup import GangScheduler
from mpiop.kube.client import PODS, ApiError, KubeClient, Resource
from mpiop.policies import graceful_stop
from testkit.gangs import bound, gpu_job, new_namespace, running_false, workers
from testkit.operator import Cluster, eventually, running_operator
from testkit.timeline import Timeline, watching

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KUBERNETES = GangScheduler("kubernetes")
POD_GROUPS = pod_group_resource(KUBERNETES)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
LOW, HIGH = 1000, 100000  # the PriorityClasses' values
POD_GRACE = 60  # the pods' terminationGracePeriodSeconds: what the scheduler's DELETE gives them
STOP_GRACE = 20  # low's stop grace: what mpiop's own DELETE of its launcher would give


@pytest.fixture(scope="module")
def simulated() -> Iterator[SimulatedCluster]:
    with SimulatedCluster(nodes=2, feature_gates={"GenericWorkload": True},
                          runtime_config=("scheduling.k8s.io/v1beta1=true",)) as cluster:
        yield cluster


@contextlib.asynccontextmanager
async def priority_classes(kube: KubeClient, prefix: str) -> AsyncIterator[tuple[str, str]]:
    """PriorityClasses `<prefix>-low` and `<prefix>-high` (cluster-scoped: the namespace names them apart)."""
    made = {f"{prefix}-low": LOW, f"{prefix}-high": HIGH}
    try:
        for name, value in made.items():
            await kube.create(PRIORITY_CLASSES, None, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                        "metadata": {"name": name}, "value": value})
        yield f"{prefix}-low", f"{prefix}-high"
    finally:
        for name in made:
            with contextlib.suppress(ApiError):
                await kube.delete(PRIORITY_CLASSES, None, name)


def prioritized_job(name: str, priority: str, **annotations: str) -> JSON:
    """4 workers x 4 GPUs and a launcher, all of `priority`, terminationGracePeriodSeconds POD_GRACE, backoffLimit 0:
    a failure counted would fail the job."""
    job = gpu_job(name, gated=False)
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["spec"].update(priorityClassName=priority, terminationGracePeriodSeconds=POD_GRACE)
    job["spec"].setdefault("runPolicy", {})["backoffLimit"] = 0
    if annotations:
        job["metadata"].setdefault("annotations", {}).update(annotations)
    return job


def everyone(job: str, attempt: int = 0) -> list[str]:
    return sorted([f"{job}-launcher" + (f"-{attempt}" if attempt else ""), *workers(job)])


async def attempt_pods(cluster: Cluster, job: str, attempt: int) -> dict[str, JSON]:
    return {n: p for n, p in (await cluster.pods()).items() if n.startswith(f"{job}-")
            and p["metadata"]["labels"].get(names.ATTEMPT_LABEL) == str(attempt)}


async def finish(cluster: Cluster, launcher: str) -> None:
    await cluster.kube.patch(PODS, cluster.ns, launcher, {"metadata": {"labels": {FINISH_LABEL: "Succeeded"}}})


async def test_a_higher_priority_gang_preempts_a_running_one_whole_which_restarts_once_it_finished(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    async with new_namespace(sim_kube, "k8s-gang-preempt") as cluster, \
            priority_classes(sim_kube, cluster.ns) as (low, high), \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES) as operator, \
            watching(sim_kube, cluster.ns) as timeline:
        try:
            await preempted_then_resumed(cluster, timeline, low, high)
            await operator.settle()
        finally:
            print("\n--- what the test saw (seconds since it began watching) ---\n" + "\n".join(timeline.lines()))


async def preempted_then_resumed(cluster: Cluster, timeline: Timeline, low: str, high: str) -> None:
    kube = cluster.kube
    await cluster.create_job(prioritized_job("low", low, **{names.STOP_GRACE_ANNOTATION: str(STOP_GRACE)}))
    await eventually(lambda: cluster.condition("low", "Running"), 60, "low Running")
    assert await bound(cluster, "low") == everyone("low")
    group = await kube.get(POD_GROUPS, cluster.ns, "low-0")
    assert (group["spec"]["priorityClassName"], group["spec"]["priority"]) == (low, LOW)

    timeline.mark("high created")
    await cluster.create_job(prioritized_job("high", high))

    async def first_attempt_gone() -> bool:
        return not await attempt_pods(cluster, "low", 0)

    await eventually(first_attempt_gone, 60, "low's first attempt's pods gone")
    await eventually(lambda: cluster.condition("high", "Running"), 60, "high Running")
    assert await bound(cluster, "high") == everyone("high")

    # Every pod of low's gang was the scheduler's victim: the condition, then its DELETE with the pod's own grace
    # (not low's stop grace: mpiop deleted none of them), all gone before high's first pod was bound.
    for pod in everyone("low"):
        facts = [f for f in timeline.of("pod", pod) if f != "deleting (grace 0s)"]  # KWOK's, as a kubelet's
        assert facts[facts.index("Running") + 1:facts.index("gone") + 1] == [
            "DisruptionTarget PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority "
            "podgroup", f"deleting (grace {POD_GRACE}s)", "gone"], (pod, facts)
        assert timeline.at("event", pod, "Normal Preempted: Preempted by podgroup")
        assert timeline.at("pod", pod, "gone") < timeline.at("pod", "high-launcher", "bound")
    high_created = timeline.at("test", "", "high created")
    assert not [f for f in timeline.facts if f.seconds > high_created and f.kind == "pod"
                and f.name.startswith("low-") and f.what == "created (attempt 0)"], "low's attempt made again"

    # mpiop: a disruption restart, not a failure (backoffLimit 0 would have failed the job), the next attempt's own
    # PodGroup, which the scheduler does not place while high runs (it may not preempt a higher priority).
    job = await cluster.job("low")
    assert job is not None
    status = job["status"]
    assert (status.get("restartCount"), status.get("disruptionRestarts")) == (1, 1)
    assert status["lastFailure"]["reason"] == "PreemptionByScheduler"
    restarting = timeline.at("job", "low", "Restarting=True MPIJobRestarting")
    assert abs(timeline.at("job", "low", "Running=False MPIJobRestarting") - restarting) < 0.01  # one status write
    told = next(f.what for f in timeline.facts if f.kind == "event" and f.name == "low"
                and "MPIJobRestarting" in f.what)
    assert told.startswith("Warning MPIJobRestarting: MPIJob k8s-gang-preempt/low is restarting after a disruption "
                           "(restart 1, disruption 1; not counted against backoffLimit 0): low-launcher"), told
    # The graceful stop had nothing to hold: the scheduler had deleted every pod itself. Had a pass seen the
    # launcher still running, it would have been a stop of reason Disrupted ended by the launcher.
    stopping = [f for f in timeline.of("job", "low") if f.startswith(graceful_stop.STOPPING)]
    assert stopping in ([], [f"{graceful_stop.STOPPING}=True {graceful_stop.DISRUPTED}",
                             f"{graceful_stop.STOPPING}=False {graceful_stop.LAUNCHER_ENDED}"]), stopping
    why = await eventually(lambda: running_false(cluster, "low"), 60, "low saying why its new gang waits")
    assert why["reason"] == "PodGroupUnschedulable"
    assert why["message"].startswith("kubernetes has not scheduled PodGroup low-1 (minCount 5, priorityClassName "
                                     f"{low}): Unschedulable: minCount (5) cannot be satisfied")
    assert await kube.get_or_none(POD_GROUPS, cluster.ns, "low-1") is not None
    assert await bound(cluster, "low") == []

    timeline.mark("high's launcher finishes")
    await finish(cluster, "high-launcher")
    await eventually(lambda: cluster.condition("high", "Succeeded"), 60, "high Succeeded")
    await eventually(lambda: cluster.condition("low", "Running"), 120, "low Running again")
    assert await bound(cluster, "low") == everyone("low", 1)
    second = await attempt_pods(cluster, "low", 1)
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "low-1"} for p in second.values())
    high_done = timeline.at("job", "high", "Succeeded=True")
    placed = [f.seconds for f in timeline.facts if f.seconds > high_created and f.kind == "pod"
              and f.name.startswith("low-") and f.what.startswith("bound to ")]
    assert len(placed) == 5 and min(placed) > high_done, "low's new attempt placed whole, once high finished"
    await eventually(lambda: _gone(cluster, "low-0"), 60, "the first attempt's PodGroup deleted")

    timeline.mark("low's launcher finishes")
    await finish(cluster, "low-launcher-1")
    await eventually(lambda: cluster.condition("low", "Succeeded"), 60, "low Succeeded")
    job = await cluster.job("low")
    assert job is not None
    assert (job["status"].get("restartCount"), job["status"].get("disruptionRestarts")) == (1, 1)
    again = max(f.seconds for f in timeline.facts if f.name == "low" and f.what == "Running=True MPIJobRunning")
    print(f"\nlow preempted at {timeline.at('pod', 'low-launcher', 'DisruptionTarget'):.2f}s (high created at "
          f"{high_created:.2f}s), restarted at {restarting:.2f}s, high Running at "
          f"{timeline.at('job', 'high', 'Running=True'):.2f}s and Succeeded at {high_done:.2f}s, low Running again "
          f"at {again:.2f}s"
          f"; low's Stopping transitions: {stopping}; lastFailure {status['lastFailure']}")


async def stop_condition(cluster: Cluster, status: str) -> JSON | None:
    """low's Stopping condition once it has `status`."""
    job = await cluster.job("low")
    found = [c for c in ((job or {}).get("status") or {}).get("conditions") or []
             if c["type"] == graceful_stop.STOPPING and c["status"] == status]
    return found[0] if found else None


HELD = "test.mpiop.dev/kubelet-grace"  # a finalizer: the launcher lingers while going, as under a kubelet's grace


async def test_a_preempted_gang_whose_launcher_lingers_stops_gracefully_before_the_next_attempt(
        simulated: SimulatedCluster, sim_kube: KubeClient) -> None:
    """As a kubelet gives mpirun its grace, the test's finalizer keeps low's preempted launcher going (KWOK would
    remove it at once): mpiop records a graceful stop of reason Disrupted (Stopping=True, the Checkpointing Event,
    the status endpoint's notice), makes no pod of the next attempt while it goes, and ends the stop LauncherEnded
    once it is gone."""
    async with new_namespace(sim_kube, "k8s-gang-preempt-held") as cluster, \
            priority_classes(sim_kube, cluster.ns) as (low, high), \
            running_operator(str(simulated.kubeconfig), cluster.ns, gang_scheduler=KUBERNETES), \
            watching(sim_kube, cluster.ns) as timeline:
        kube = cluster.kube
        try:
            await cluster.create_job(prioritized_job("low", low, **{names.STOP_GRACE_ANNOTATION: str(STOP_GRACE)}))
            await eventually(lambda: cluster.condition("low", "Running"), 60, "low Running")
            await kube.patch(PODS, cluster.ns, "low-launcher", {"metadata": {"finalizers": [HELD]}})
            timeline.mark("high created")
            await cluster.create_job(prioritized_job("high", high))

            condition = await eventually(lambda: stop_condition(cluster, "True"), 60, "low Stopping")
            print(f"\nlow: Stopping=True {condition['reason']}: {condition['message']}")
            assert condition["reason"] == graceful_stop.DISRUPTED
            launcher = await kube.get(PODS, cluster.ns, "low-launcher")
            assert launcher["metadata"].get("deletionTimestamp"), "the launcher is going"
            assert not await attempt_pods(cluster, "low", 1), "the next attempt waits for the old launcher"
            events = [f.what for f in timeline.facts if f.kind == "event" and f.name == "low"]
            assert any(e.startswith("Normal Checkpointing: ") for e in events), events

            timeline.mark("the launcher's grace ends")
            await kube.patch(PODS, cluster.ns, "low-launcher", {"metadata": {"finalizers": None}})

            ended = await eventually(lambda: stop_condition(cluster, "False"), 60, "low's stop ended")
            print(f"low: Stopping=False {ended['reason']}: {ended['message']}")
            assert ended["reason"] == graceful_stop.LAUNCHER_ENDED
            await eventually(lambda: kube.get_or_none(POD_GROUPS, cluster.ns, "low-1"), 60, "the next attempt's group")
            job = await cluster.job("low")
            assert job is not None
            assert (job["status"].get("restartCount"), job["status"].get("disruptionRestarts")) == (1, 1)
        finally:
            with contextlib.suppress(ApiError):
                await kube.patch(PODS, cluster.ns, "low-launcher", {"metadata": {"finalizers": None}})
            print("--- what the test saw ---\n" + "\n".join(timeline.lines()))


async def _gone(cluster: Cluster, name: str) -> bool:
    return await cluster.kube.get_or_none(POD_GROUPS, cluster.ns, name) is None
