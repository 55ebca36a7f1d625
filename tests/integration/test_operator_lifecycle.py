"""A job's life through the real apiserver: objects, hostfile, Running, Succeeded, clean-up."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mpiop.kube.client import CONFIGMAPS, MPIJOBS, SECRETS, SERVICES
from testkit.operator import Cluster, Operator, eventually, mpijob, start_pods
from testkit.pods import env_of


async def test_two_gpu_workers_run_to_success(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("pi", workers=2, gpus=4))
    pods = await eventually(lambda: _pods_named(cluster, {"pi-launcher", "pi-worker-0", "pi-worker-1"}),
                            what="launcher and 2 workers")
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, "pi-config")
    ns = cluster.ns
    assert config["data"]["hostfile"] == (
        f"pi-worker-0.pi.{ns}.svc slots=4\npi-worker-1.pi.{ns}.svc slots=4\n"
    )
    secret = await cluster.kube.get(SECRETS, ns, "pi-ssh")
    assert secret["type"] == "kubernetes.io/ssh-auth" and secret["immutable"] is True
    assert base64.b64decode(secret["data"]["ssh-publickey"]).startswith(b"ssh-ed25519 ")
    service = await cluster.kube.get(SERVICES, ns, "pi")
    assert service["spec"]["clusterIP"] == "None"

    launcher = pods["pi-launcher"]
    env = env_of(launcher)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "4"
    assert "NVIDIA_VISIBLE_DEVICES" in env and not env["NVIDIA_VISIBLE_DEVICES"]  # blanked
    worker = pods["pi-worker-1"]
    assert worker["spec"]["hostname"] == "pi-worker-1" and worker["spec"]["subdomain"] == "pi"
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert {m["mountPath"] for m in worker["spec"]["containers"][0]["volumeMounts"]} >= {"/root/.ssh"}
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "MPIJob" for p in pods.values())

    await cluster.run_all(["pi-worker-0", "pi-worker-1", "pi-launcher"])
    running = await eventually(lambda: cluster.condition("pi", "Running"), what="Running")
    assert running["reason"] == "MPIJobRunning"
    # Replica counts and discover_hosts.sh are soft writes: they may follow Running by up to 5 s.
    await eventually(lambda: _workers(cluster, "pi", "ready", 2), what="2 ready workers in status")
    await eventually(lambda: _discovers(cluster, "pi", "echo pi-worker-1.pi."), what="discover_hosts.sh")

    await cluster.set_phase("pi-launcher", "Succeeded", exit_code=None)
    await eventually(lambda: cluster.condition("pi", "Succeeded"), what="Succeeded")
    # cleanPodPolicy defaults to Running: the still-running workers go, the finished launcher stays.
    await eventually(lambda: _pods_are(cluster, {"pi-launcher"}), what="workers deleted after success")
    job = await cluster.job("pi")
    assert job is not None and job["status"]["completionTime"]
    assert job["status"]["conditions"][-1]["type"] == "Succeeded"


async def test_wait_for_workers_ready_holds_the_launcher(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("wait", workers=2, launcherCreationPolicy="WaitForWorkersReady"))
    await eventually(lambda: _pods_named(cluster, {"wait-worker-0", "wait-worker-1"}), what="workers")
    await cluster.set_phase("wait-worker-0", "Running", ready=True)
    await cluster.set_phase("wait-worker-1", "Running", ready=False)
    await operator.settle()
    assert await cluster.pod("wait-launcher") is None
    await cluster.set_phase("wait-worker-1", "Running", ready=True)
    await eventually(lambda: cluster.pod("wait-launcher"), what="launcher once all workers are Ready")


async def test_a_resumed_job_waits_for_its_new_workers_ready_again(cluster: Cluster, operator: Operator) -> None:
    """kubeflow #615/#868: after suspend and resume, WaitForWorkersReady still holds the launcher until the
    resumed job's own workers are Ready (the ones Ready before the suspension are gone)."""
    await cluster.create_job(mpijob("rs", workers=2, launcherCreationPolicy="WaitForWorkersReady"))
    workers = {"rs-worker-0", "rs-worker-1"}
    await eventually(lambda: _pods_named(cluster, workers), what="workers")
    await cluster.run_all(sorted(workers))
    await eventually(lambda: cluster.pod("rs-launcher"), what="the launcher once the workers are Ready")
    await cluster.kube.patch(MPIJOBS, cluster.ns, "rs", {"spec": {"runPolicy": {"suspend": True}}})
    await eventually(lambda: _pods_are(cluster, set()), what="every pod deleted while suspended")
    await cluster.kube.patch(MPIJOBS, cluster.ns, "rs", {"spec": {"runPolicy": {"suspend": False}}})
    await eventually(lambda: _pods_named(cluster, workers), what="the workers made again on resume")
    await operator.settle()
    assert set(await cluster.pods()) == workers, "no launcher while the resumed workers are Pending"
    await cluster.set_phase("rs-worker-0", "Running", ready=True)
    await cluster.set_phase("rs-worker-1", "Running", ready=False)
    await operator.settle()
    assert await cluster.pod("rs-launcher") is None, "no launcher while one resumed worker is not Ready"
    await cluster.set_phase("rs-worker-1", "Running", ready=True)
    await eventually(lambda: cluster.pod("rs-launcher"), what="the launcher once the resumed workers are Ready")


async def test_a_settled_job_makes_no_writes(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("quiet", workers=1))
    await start_pods(cluster, "quiet", 1)
    await operator.settle()
    before = sum(operator.requests.writes().values())
    for _ in range(3):
        operator.manager.queue.add(f"{cluster.ns}/quiet")
        await operator.settle()
    assert sum(operator.requests.writes().values()) == before


async def _workers(cluster: Cluster, name: str, count: str, n: int) -> bool:
    """Whether the job's status counts `n` workers `count` ("active", "ready", ...)."""
    job = await cluster.job(name) or {}
    counts = ((job.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}
    return bool(counts.get(count) == n)


async def _discovers(cluster: Cluster, name: str, line: str) -> bool:
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, f"{name}-config")
    return line in config["data"].get("discover_hosts.sh", "")


async def _pods_named(cluster: Cluster, names: set[str]) -> dict[str, dict[str, Any]] | None:
    pods = await cluster.pods()
    return pods if names <= set(pods) else None


async def _pods_are(cluster: Cluster, names: set[str]) -> bool:
    return set(await cluster.pods()) == names


async def test_settle_waits_out_held_soft_writes_and_fails_while_they_wait(cluster: Cluster,
                                                                           operator: Operator) -> None:
    """One worker Running is news only for soft writes (its count, discover_hosts.sh), held up to 5 s: settle
    says so while they wait, and returns once they are written, so one read then sees them."""
    await cluster.create_job(mpijob("soft", workers=2))
    await eventually(lambda: _pods_named(cluster, {"soft-launcher", "soft-worker-0", "soft-worker-1"}), what="pods")
    await operator.settle()
    await cluster.set_phase("soft-worker-0", "Running", ready=True)
    with pytest.raises(AssertionError, match=r"not quiet after 0\.5s"):
        await operator.settle(timeout=0.5)
    await operator.settle()
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, "soft-config")
    assert "echo soft-worker-0.soft." in config["data"]["discover_hosts.sh"]
    assert await _workers(cluster, "soft", "ready", 1)
