"""Each run policy through the real apiserver, the test playing the kubelet."""

from __future__ import annotations

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, SECRETS, SERVICES, Resource
from testkit.operator import Cluster, Operator, eventually, mpijob, running_operator, start_pods


async def _pods(cluster: Cluster, names: set[str]) -> bool:
    return names <= set(await cluster.pods())


async def _no_pod_left(cluster: Cluster) -> bool:
    return not await cluster.pods()


async def test_launcher_failure_restarts_then_fails_at_backoff_limit(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("bo", workers=1, run_policy={"backoffLimit": 1}))
    await start_pods(cluster, "bo", 1)
    await cluster.set_phase("bo-launcher", "Failed", exit_code=3)
    restarting = await eventually(lambda: cluster.condition("bo", "Restarting"), what="Restarting")
    assert "bo-launcher container main Error exit 3" in restarting["message"]
    # The whole job is made again: the next attempt's launcher (its own name: the failed one is kept) and worker.
    await eventually(lambda: cluster.pod("bo-launcher-1"), what="the next attempt's launcher")
    job = await cluster.job("bo")
    assert job is not None and job["status"]["restartCount"] == 1
    await cluster.set_phase("bo-launcher-1", "Failed", exit_code=7)
    failed = await eventually(lambda: cluster.condition("bo", "Failed"), what="Failed")
    assert failed["reason"] == "MPIJobFailed"
    assert "bo-launcher-1 container main Error exit 7" in failed["message"]
    assert "backoffLimit 1" in failed["message"]


async def test_a_worker_made_again_under_the_launcher_makes_its_exit_0_no_success(cluster: Cluster,
                                                                                  operator: Operator) -> None:
    """Someone deletes a worker while mpirun runs; mpiop makes it again at once, labelled with the launcher's uid
    (as the apiserver gave it). The launcher then exits 0 (prterun may, having lost the worker's daemon): the
    attempt restarts, blaming the worker, whatever the creation timestamps say."""
    await cluster.create_job(mpijob("rw", workers=2))
    await start_pods(cluster, "rw", 2)
    launcher, lost = await cluster.pod("rw-launcher"), await cluster.pod("rw-worker-1")
    assert launcher is not None and lost is not None
    assert "mpiop.kubeflow.org/replacement" not in lost["metadata"]["labels"]
    await cluster.kube.delete(PODS, cluster.ns, "rw-worker-1")

    async def made_again() -> JSON | None:
        pod = await cluster.pod("rw-worker-1")
        return pod if pod is not None and pod["metadata"]["uid"] != lost["metadata"]["uid"] else None

    worker = await eventually(made_again, what="rw-worker-1 made again")
    assert worker["metadata"]["labels"]["mpiop.kubeflow.org/replacement"] == launcher["metadata"]["uid"]
    await cluster.set_phase("rw-worker-1", "Running", ready=True)
    await cluster.set_phase("rw-launcher", "Succeeded", exit_code=0)
    restarting = await eventually(lambda: cluster.condition("rw", "Restarting"), what="Restarting")
    assert "worker rw-worker-1 (rank 1) was made again (its predecessor lost) while the launcher ran" \
        in restarting["message"], restarting["message"]
    assert await cluster.condition("rw", "Succeeded") is None


async def test_oom_killed_worker_restarts_the_job(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("oom", workers=2))
    await start_pods(cluster, "oom", 2)
    await cluster.set_phase("oom-worker-1", "Failed", exit_code=137, reason="OOMKilled")
    restarting = await eventually(lambda: cluster.condition("oom", "Restarting"), what="Restarting")
    assert "oom-worker-1 (rank 1) container main OOMKilled exit 137" in restarting["message"]

    async def restarting_event() -> bool:  # Events are sent in the background, just after the status
        events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
        return any(e["reason"] == "MPIJobRestarting" and "OOMKilled" in e["message"] for e in events["items"])

    await eventually(restarting_event, what="the MPIJobRestarting Event")


@pytest.mark.parametrize(
    ("policy", "left"),
    [("Running", {"cp-launcher"}), ("All", set()), ("None", {"cp-launcher", "cp-worker-0", "cp-worker-1"})],
    ids=["running-keeps-the-finished-launcher", "all-deletes-every-pod", "none-keeps-every-pod"],
)
async def test_clean_pod_policy_after_success(cluster: Cluster, operator: Operator, policy: str,
                                              left: set[str]) -> None:
    await cluster.create_job(mpijob("cp", workers=2, run_policy={"cleanPodPolicy": policy}))
    await start_pods(cluster, "cp", 2)
    await cluster.set_phase("cp-launcher", "Succeeded")
    await eventually(lambda: cluster.condition("cp", "Succeeded"), what="Succeeded")

    async def only_left() -> bool:
        return set(await cluster.pods()) == left

    await eventually(only_left, what=f"pods left by cleanPodPolicy {policy}: {left}")
    await operator.settle()
    assert set(await cluster.pods()) == left


async def test_active_deadline_fails_and_cleans(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("dl", workers=1, run_policy={"activeDeadlineSeconds": 3}))
    await start_pods(cluster, "dl", 1)
    failed = await eventually(lambda: cluster.condition("dl", "Failed"), timeout=15, what="DeadlineExceeded")
    assert failed["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds=3" in failed["message"]
    await eventually(lambda: _no_pod_left(cluster), what="running pods deleted")


async def test_ttl_deletes_the_finished_job(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("ttl", workers=1, run_policy={"ttlSecondsAfterFinished": 2}))
    await start_pods(cluster, "ttl", 1)
    await cluster.set_phase("ttl-launcher", "Succeeded")
    await eventually(lambda: cluster.condition("ttl", "Succeeded"), what="Succeeded")

    async def gone() -> bool:
        return await cluster.job("ttl") is None

    await eventually(gone, timeout=20, what="the MPIJob deleted by its TTL")


async def test_suspend_then_resume_from_the_current_template(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("sus", workers=1, run_policy={"suspend": True}))
    suspended = await eventually(lambda: cluster.condition("sus", "Suspended"), what="Suspended")
    assert suspended["reason"] == "MPIJobSuspended"
    await operator.settle()
    assert await cluster.pods() == {}
    assert await cluster.kube.get(CONFIGMAPS, cluster.ns, "sus-config")  # config is kept
    job = await cluster.job("sus")
    assert job is not None and "startTime" not in job["status"]
    # Kueue edits templates while a job is suspended; the pods come from the edited template.
    await cluster.kube.patch(MPIJOBS, cluster.ns, "sus", {"spec": {
        "runPolicy": {"suspend": False},
        "mpiReplicaSpecs": {"Worker": {"template": {"spec": {"nodeSelector": {"pool": "gpu-a100"}}}}},
    }})
    worker = await eventually(lambda: cluster.pod("sus-worker-0"), what="worker after resume")
    assert worker["spec"]["nodeSelector"] == {"pool": "gpu-a100"}
    job = await cluster.job("sus")
    assert job is not None and job["status"]["startTime"]
    assert any(c["type"] == "Suspended" and c["status"] == "False" for c in job["status"]["conditions"])
    await start_pods(cluster, "sus", 1)


async def test_jobs_managed_by_another_controller_are_left_alone(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("ext", workers=1, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}))
    await operator.settle()
    assert await cluster.pods() == {}
    job = await cluster.job("ext")
    assert job is not None and not job.get("status")
    assert not [c for c in operator.requests.calls if c[0] not in ("GET", "WATCH") and c[1].startswith("mpijobs")]


async def test_refused_pod_template_fails_the_job_once(cluster: Cluster, operator: Operator) -> None:
    manifest = mpijob("bad", workers=1)
    # Schema-valid, but the apiserver refuses it when the Pod is created: an env var named "1=2".
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "1=2", "value": "x"}
    ]
    await cluster.create_job(manifest)
    failed = await eventually(lambda: cluster.condition("bad", "Failed"), what="ValidationError")
    assert failed["reason"] == "ValidationError"
    assert "Pod bad-worker-0" in failed["message"]
    await operator.settle()
    pod_posts = [c for c in operator.requests.calls if c[:2] == ("POST", "pods") and c[2] == 422]
    assert len(pod_posts) == 1  # no retry storm


async def test_deleting_a_running_job_collects_everything_it_owned(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("del", workers=2))
    await start_pods(cluster, "del", 2)
    await cluster.kube.delete(MPIJOBS, cluster.ns, "del", propagation="Background")

    async def all_gone() -> bool:
        for resource, name in ((CONFIGMAPS, "del-config"), (SECRETS, "del-ssh"), (SERVICES, "del")):
            if await _exists(cluster, resource, name):
                return False
        return not await cluster.pods()

    await eventually(all_gone, timeout=60, what="garbage collection of pods, config, secret, service")


async def _exists(cluster: Cluster, resource: Resource, name: str) -> bool:
    return await cluster.kube.get_or_none(resource, cluster.ns, name) is not None


async def test_operator_restarted_mid_reconcile_makes_no_duplicates(control_plane: ControlPlane,
                                                                   cluster: Cluster) -> None:
    kubeconfig = str(control_plane.kubeconfig)
    await cluster.create_job(mpijob("rs", workers=6))
    async with running_operator(kubeconfig, cluster.ns) as first:
        # Stop as soon as the first pod is created: the reconcile is in the middle of its creations.
        await eventually(lambda: _any_pod_posted(first), timeout=20, what="the first pod creation")
    async with running_operator(kubeconfig, cluster.ns) as second:
        wanted = {"rs-launcher", *(f"rs-worker-{i}" for i in range(6))}
        await eventually(lambda: _pods(cluster, wanted), what="all pods after the restart")
        secrets = await cluster.kube.list(SECRETS, cluster.ns)
        assert [s["metadata"]["name"] for s in secrets["items"]] == ["rs-ssh"]
        assert set(await cluster.pods()) == wanted
        await start_pods(cluster, "rs", 6)
        await cluster.set_phase("rs-launcher", "Succeeded")
        await eventually(lambda: cluster.condition("rs", "Succeeded"), what="Succeeded after restart")
        created = [c for c in second.requests.calls if c[:2] == ("POST", "pods") and c[2] == 201]
        assert len(created) <= 7


async def _any_pod_posted(operator: Operator) -> bool:
    return any(c[:2] == ("POST", "pods") for c in operator.requests.calls)
