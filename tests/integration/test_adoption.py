"""Switching from kubeflow/mpi-operator to mpiop with jobs in flight, on the real control plane.

What kubeflow's operator v0.8.2 left for its `pi` example (testkit/fixtures) is created again while no operator
runs: the MPIJob with kubeflow's status, its Secret, ConfigMap, Service and worker pods, and its launcher
`Job`, whose pod the cluster's Job controller makes (as it did for kubeflow). Then mpiop starts; the test
plays the kubelet by writing pod status, and the Job controller follows the launcher pod.
"""

from __future__ import annotations

from devcluster.controlplane import ControlPlane
from mpiop import metrics, names
from mpiop.api.raw import JSON
from mpiop.kube.client import BATCH_JOBS, CONFIGMAPS, SECRETS, SERVICES
from testkit import kubeflow
from testkit.operator import Cluster, Operator, eventually, mpijob, running_operator

KUBEFLOW_CREATED = "2026-11-23T03:16:15Z"  # the fixture's Created condition: kept, never reset


def pod_writes(operator: Operator) -> list[tuple[str, str, int]]:
    return [c for c in operator.requests.calls if c[1] == "pods" and c[0] in ("POST", "DELETE")]


async def launcher_batch_job(cluster: Cluster) -> JSON | None:
    return await cluster.kube.get_or_none(BATCH_JOBS, cluster.ns, "pi-launcher")


async def start_kubeflows_launcher(cluster: Cluster, moment: str) -> str:
    """The Job controller's pod for kubeflow's launcher Job, given the fixture's status (Running, Ready)."""
    pod = await kubeflow.launcher_batch_job_pod(cluster.kube, cluster.ns)
    name: str = pod["metadata"]["name"]
    await kubeflow.set_pod_status(cluster.kube, cluster.ns, name, kubeflow.launcher_pod_status(moment))
    return name


async def mpiop_wrote_status(cluster: Cluster) -> bool:
    job = await cluster.job("pi")
    return bool(job and job["status"].get("lastReconcileTime"))


async def test_a_running_kubeflow_job_is_adopted_and_completed_without_a_pod_deleted(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    await kubeflow.recreate(cluster.kube, cluster.ns, "kf-pi-ok.1-running")
    launcher = await start_kubeflows_launcher(cluster, "kf-pi-ok.1-running")
    before = {n: p["metadata"]["uid"] for n, p in (await cluster.pods()).items()}
    assert set(before) == {launcher, "pi-worker-0", "pi-worker-1"}
    # A Job of someone else's, labelled `app` too: never cached.
    other_pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    await cluster.kube.create(BATCH_JOBS, cluster.ns, {"metadata": {"name": "other", "labels": {"app": "other"}},
                                                 "spec": {"suspend": True, "template": other_pod}})

    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
        await eventually(lambda: mpiop_wrote_status(cluster), what="mpiop's first status write")
        assert list(operator.manager.caches.launcher_batch_jobs.cached_keys()) == [f"{cluster.ns}/pi-launcher"]
        info = next(m for m in metrics.MPIJOB_GAUGES.collect() if m.name == "mpi_operator_job_info")
        assert [s.labels for s in info.samples] == [{"launcher": "pi-launcher", "namespace": cluster.ns}]

        async def adopted_events() -> list[str]:  # Events are sent in the background, just after the status
            events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
            return [e["message"] for e in events["items"] if e["reason"] == "MPIJobAdopted"]

        assert await eventually(adopted_events, what="the MPIJobAdopted Event") == [
            f"MPIJob {cluster.ns}/pi is taken over from kubeflow/mpi-operator: its launcher Job pi-launcher runs on."]
        await operator.settle()
        assert {n: p["metadata"]["uid"] for n, p in (await cluster.pods()).items()} == before
        assert pod_writes(operator) == [], "no pod of a running adopted job is created or deleted"
        job = await cluster.job("pi")
        assert job is not None
        assert [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]] == [
            ("Created", "True", "MPIJobCreated"), ("Running", "True", "MPIJobRunning")]
        assert job["status"]["conditions"][0]["lastTransitionTime"] == KUBEFLOW_CREATED
        # kubeflow's ConfigMap, Secret and Service are claimed: mpiop's informers see them from now on.
        for resource, name in ((CONFIGMAPS, "pi-config"), (SECRETS, "pi-ssh"), (SERVICES, "pi")):
            labels = (await cluster.kube.get(resource, cluster.ns, name))["metadata"]["labels"]
            assert labels == {"app": "pi", names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME,
                              names.JOB_NAME_LABEL: "pi"}, name

        # The job cannot succeed before its launcher does: everything until now is "before success".
        before_success = pod_writes(operator)
        await cluster.set_phase(launcher, "Succeeded", exit_code=0, reason="Completed")
        succeeded = await eventually(lambda: cluster.condition("pi", "Succeeded"), what="Succeeded")

        async def workers_cleaned() -> bool:
            return set(await cluster.pods()) == {launcher}

        await eventually(workers_cleaned, what="cleanPodPolicy Running: the running workers deleted")
        after_success = pod_writes(operator)[len(before_success):]
        print(f"\npod creations/deletions by mpiop before Succeeded: {len(before_success)}; "
              f"after it (cleanPodPolicy Running): {[c[0] for c in after_success]}")
    assert before_success == []
    assert [c[0] for c in after_success] == ["DELETE"]  # the two workers in one DELETE collection, nothing else

    assert succeeded["reason"] == "MPIJobSucceeded"
    job = await cluster.job("pi")
    assert job is not None
    assert [(c["type"], c["status"]) for c in job["status"]["conditions"]] == [
        ("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert job["status"]["conditions"][0]["lastTransitionTime"] == KUBEFLOW_CREATED
    assert job["status"]["replicaStatuses"]["Launcher"]["succeeded"] == 1
    assert await launcher_batch_job(cluster) is not None, "the completed Job stays (its pod's log readable)"
    table = control_plane.kubectl("get", "mpijob", "pi", "-n", cluster.ns)
    print(table)
    assert table.splitlines()[1].split()[1] == "Succeeded"


async def test_a_kubeflow_job_with_a_failed_worker_is_restarted_by_mpiop(
        control_plane: ControlPlane, cluster: Cluster) -> None:
    await kubeflow.recreate(cluster.kube, cluster.ns, "kf-pi-fail.2-finished")
    old_launcher = await start_kubeflows_launcher(cluster, "kf-pi-fail.2-finished")

    async with running_operator(str(control_plane.kubeconfig), cluster.ns):
        restarting = await eventually(lambda: cluster.condition("pi", "Restarting"), what="Restarting")
        assert "pi-worker-0 (rank 0) container mpi-worker Error exit 1" in restarting["message"]

        async def own_launcher() -> JSON | None:
            pods = await cluster.pods()
            return pods.get("pi-launcher-1") if old_launcher not in pods else None  # attempt 1's launcher

        launcher = await eventually(own_launcher, timeout=60, what="mpiop's launcher Pod, kubeflow's gone")
        assert await launcher_batch_job(cluster) is None, "kubeflow's launcher Job is deleted on the restart"
        assert launcher["metadata"]["labels"][names.ATTEMPT_LABEL] == "1"
        assert launcher["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
        wanted = ["pi-launcher-1", "pi-worker-0", "pi-worker-1"]

        async def all_of_attempt_1() -> bool:
            pods = await cluster.pods()
            return sorted(pods) == wanted and all(
                p["metadata"]["labels"].get(names.ATTEMPT_LABEL) == "1" for p in pods.values())

        await eventually(all_of_attempt_1, what="the new attempt's pods")
        await cluster.run_all(wanted)
        await eventually(lambda: cluster.condition("pi", "Running"), what="Running again")
        await cluster.set_phase("pi-launcher-1", "Succeeded", exit_code=0, reason="Completed")
        await eventually(lambda: cluster.condition("pi", "Succeeded"), what="Succeeded")

    job = await cluster.job("pi")
    assert job is not None and job["status"]["restartCount"] == 1
    assert [(c["type"], c["status"]) for c in job["status"]["conditions"]] == [
        ("Created", "True"), ("Restarting", "False"), ("Running", "False"), ("Succeeded", "True")]
    assert job["status"]["conditions"][0]["reason"] == "MPIJobCreated"


async def test_a_job_kubeflow_finished_is_left_alone(control_plane: ControlPlane, cluster: Cluster) -> None:
    await kubeflow.recreate(cluster.kube, cluster.ns, "kf-pi-ok.2-finished")
    before = await cluster.job("pi")
    assert before is not None and before["status"]["completionTime"] == "2026-11-23T03:17:20Z"  # TTL 60 s: long past
    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
        await operator.settle()
        writes = operator.requests.writes()
    after = await cluster.job("pi")
    assert after is not None, "not deleted by its TTL: kubeflow's operator never deleted finished MPIJobs"
    assert after["status"] == before["status"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not writes, f"mpiop wrote {writes}"


async def test_an_object_of_the_same_name_the_job_does_not_control_is_not_claimed(
        cluster: Cluster, operator: Operator) -> None:
    await cluster.kube.create(CONFIGMAPS, cluster.ns, {"metadata": {"name": "mine-config", "labels": {"app": "x"}},
                                                       "data": {"hostfile": "not mpiop's\n"}})
    await cluster.create_job(mpijob("mine", workers=1))

    async def conflict() -> bool:  # someone else's object: never used, the job does not start
        job = await cluster.job("mine")
        conditions = ((job or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "ReplicaFailure" and c["reason"] == "ErrResourceExists" for c in conditions)

    await eventually(conflict, what="the name conflict reported")
    await operator.settle()
    assert await cluster.pods() == {}
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, "mine-config")
    assert config["metadata"]["labels"] == {"app": "x"} and config["data"] == {"hostfile": "not mpiop's\n"}
    claims = [c for c in operator.requests.calls if c[:2] == ("PATCH", "configmaps")]
    assert claims and all(400 <= code < 500 for _, _, code in claims), claims
