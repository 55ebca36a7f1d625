"""Host-network MPI jobs on the real node: launcher and workers all with `hostNetwork: true` on one node.

They share the node's network namespace, so with one fixed sshd port the second worker could not even listen.
mpiop gives each worker its own port (MPIOP_SSH_PORT, a named hostPort) and the launcher an SSH client config
naming them; the manifests say nothing about ports. On the host network every rank reports the node's
hostname, so that the ranks really ran in both worker pods is read from the workers' sshd logs.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from devcluster.pi_job import pi_job
from mpiop.api.raw import JSON
from testkit.e2e.kube import is_true, wait_for
from testkit.e2e.mpi import PI_LINE, assert_succeeded, delete_worker_mid_run, finalize_hang, mpich_pi_command
from testkit.e2e.session import E2E, OPENMPI, REPORT
from testkit.e2e.training import IDENTITY, RANKS, ddp_job, script_config_map
from testkit.pods import env_of

# On the node's own network: host ports (mpiop's 20000-30000, outside the ephemeral range every other process's
# ports come from) that another host-network scenario's jobs would take, and the port-conflict scenario's count of
# what the scheduler refused. Every host-network scenario (test_exec_launch's too) in one xdist group: one worker,
# one after another; beside any other scenario, which binds nothing on the host.
pytestmark = pytest.mark.xdist_group("host-network")

ACCEPTED = "Accepted publickey"


def host_network_job(name: str, image: str, **kwargs: Any) -> JSON:
    """pi_job with `hostNetwork: true` in both templates, and nothing else about the network. Workers are kept
    after the job finished (cleanPodPolicy None) for their sshd logs."""
    manifest = pi_job(name, image, worker_pod_spec={"hostNetwork": True}, **kwargs)
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["hostNetwork"] = True
    manifest["spec"].setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    return manifest


def ssh_port(pod: JSON) -> int:
    ports = [p for p in pod["spec"]["containers"][0].get("ports", []) if p.get("name") == "mpiop-ssh"]
    assert len(ports) == 1, pod["spec"]["containers"][0]
    assert ports[0]["hostPort"] == ports[0]["containerPort"]
    return int(ports[0]["hostPort"])


def workers(e2e: E2E, job: str) -> list[JSON]:
    return sorted((p for p in e2e.api.pods(e2e.ns) if p["metadata"]["name"].startswith(f"{job}-worker-")),
                  key=lambda p: str(p["metadata"]["name"]))


def assert_host_network_pi(e2e: E2E, job: str, ranks: int = 4, log: str | None = None) -> dict[str, int]:
    """pi from `ranks` ranks; both workers on the host network, on their own ports, and reached over ssh.
    Returns each worker's port. `log`: the launcher's log, if the caller fetched it already."""
    log = e2e.launcher_log(job) if log is None else log
    match = PI_LINE.search(log)
    assert match, f"no pi estimate in the launcher log:\n{log}"
    assert abs(float(match.group(1)) - 3.14159) < 0.01, log
    assert int(match.group(3)) == ranks, log
    pods = workers(e2e, job)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    ports = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"].get("hostNetwork") is True
        assert pod["status"].get("podIP") == pod["status"].get("hostIP"), "on the node's own address"
        env = env_of(pod)
        ports[name] = ssh_port(pod)
        assert env["MPIOP_SSH_PORT"] == str(ports[name])
        worker_log = e2e.api.logs(e2e.ns, name)
        assert f"Server listening on 0.0.0.0 port {ports[name]}." in worker_log, worker_log
        assert ACCEPTED in worker_log, f"the launcher never logged into {name}:\n{worker_log}"
        REPORT.setdefault("host_network", {})[f"{e2e.ns}/{name}"] = [
            line for line in worker_log.splitlines() if "Server listening on 0.0.0.0" in line or ACCEPTED in line]
    assert len(set(ports.values())) == 2, ports
    return ports


@pytest.mark.parametrize("suite", OPENMPI)
def test_host_network_openmpi_pi(e2e: E2E) -> None:
    """Open MPI, launcher and 2 workers on the host network of one node: impossible with one sshd port."""
    started = e2e.create_job(host_network_job("hn", e2e.image))
    job = e2e.wait_finished("hn")
    e2e.record("host-network-openmpi-pi", time.monotonic() - started)
    assert_succeeded(job)
    ports = assert_host_network_pi(e2e, "hn")
    config = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/configmaps/hn-config")["data"]["ssh_config"]
    for name, port in ports.items():
        assert re.search(rf"^Host {name} .*\n    Port {port}$", config, re.M), config


def test_host_network_mpich_pi(e2e: E2E) -> None:
    """MPICH (Hydra), the same shape: Hydra reads the ports from the config through HYDRA_LAUNCHER_EXTRA_ARGS,
    and forks no proxy locally for a worker that shares the launcher's address (HYDRA_LAUNCHER_AUTOFORK=0).
    The same command as test_mpich_pi (MPICH 4.0.2's Finalize hang after the result: mpich_pi_command)."""
    started = e2e.create_job(host_network_job("hn-mpich", e2e.image, implementation="MPICH",
                                              launcher_command=mpich_pi_command(), runPolicy={"backoffLimit": 6}))
    job = e2e.wait_finished("hn-mpich", timeout=420)
    restarts = (job.get("status") or {}).get("restartCount", 0)
    log = e2e.launcher_log("hn-mpich") if is_true(job, "Succeeded") else ""
    e2e.record(f"host-network-mpich-pi ({restarts} restarts, {finalize_hang(log)})", time.monotonic() - started)
    assert_succeeded(job)
    assert_host_network_pi(e2e, "hn-mpich", log=log)


@pytest.mark.parametrize("suite", OPENMPI)
def test_host_network_openmpi_pi_non_root(e2e: E2E) -> None:
    """kubeflow's non-root shape on the host network: uid 1000 runs sshd unprivileged on its port (>1024, so no
    capability), the launcher's ssh as uid 1000 reads the same mounted config."""
    command = ["sh", "-c", 'echo "launcher runs as $(id -un)"; exec mpi-wait-hosts mpirun.openmpi -n 4 '
               '/home/mpiuser/pi 2000000']
    started = e2e.create_job(host_network_job("hn-nonroot", e2e.image, run_as_user=1000, launcher_command=command,
                                              ssh_auth_mount_path="/home/mpiuser/.ssh"))
    job = e2e.wait_finished("hn-nonroot")
    e2e.record("host-network-openmpi-pi-non-root", time.monotonic() - started)
    assert_succeeded(job)
    assert "launcher runs as mpiuser" in e2e.launcher_log("hn-nonroot")
    assert_host_network_pi(e2e, "hn-nonroot")


def test_two_host_network_jobs_at_once(e2e: E2E) -> None:
    """Two host-network jobs on the one node at the same time: four sshd ports, none shared."""
    started = time.monotonic()
    for name in ("hn-a", "hn-b"):
        e2e.create_job(host_network_job(name, e2e.image))
    finished = [e2e.wait_finished(name) for name in ("hn-a", "hn-b")]
    e2e.record("two-host-network-jobs-at-once", time.monotonic() - started)
    ports: dict[str, int] = {}
    for name, job in zip(("hn-a", "hn-b"), finished, strict=True):
        assert_succeeded(job)
        ports |= assert_host_network_pi(e2e, name)
    assert len(set(ports.values())) == 4, ports


def test_host_network_port_conflict_moves_the_worker(e2e: E2E) -> None:
    """Another host-network pod holds the port mpiop gave worker-1: the scheduler cannot place worker-1
    (no free ports), so mpiop makes it again on the next port of its sequence, and the job succeeds."""
    manifest = host_network_job("hn-busy", e2e.image, runPolicy={"suspend": True})
    started = e2e.create_job(manifest)
    config = wait_for(lambda: (e2e.api.get_or_none(f"/api/v1/namespaces/{e2e.ns}/configmaps/hn-busy-config")
                               or {}).get("data", {}).get("ssh_config"), 60, "the suspended job's SSH config")
    taken = int(re.search(r"^# port hn-busy-worker-1 (\d+)$", config, re.M).group(1))  # type: ignore[union-attr]
    blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "port-holder"}, "spec": {
        "hostNetwork": True, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "hold", "image": e2e.image, "imagePullPolicy": "Never", "command": ["sleep", "600"],
                        "ports": [{"containerPort": taken, "hostPort": taken}]}]}}
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/pods", blocker)
    wait_for(lambda: (e2e.api.pod(e2e.ns, "port-holder") or {}).get("spec", {}).get("nodeName"), 60,
             "the port holder to be scheduled")
    e2e.api.merge_patch(f"/apis/kubeflow.org/v2beta1/namespaces/{e2e.ns}/mpijobs/hn-busy",
                        {"spec": {"runPolicy": {"suspend": False}}})
    job = e2e.wait_finished("hn-busy")
    e2e.record("host-network-port-conflict-moved", time.monotonic() - started)
    assert_succeeded(job)
    ports = assert_host_network_pi(e2e, "hn-busy")
    assert ports["hn-busy-worker-1"] != taken, (taken, ports)
    refused = [e["message"] for e in e2e.api.events(e2e.ns) if e.get("reason") == "FailedScheduling"
               and e["involvedObject"]["name"] == "hn-busy-worker-1"]
    assert any("didn't have free ports" in m for m in refused), refused
    REPORT.setdefault("host_network", {})["port-conflict"] = {"taken": taken, "moved to": ports, "scheduler": refused}
    assert (job.get("status") or {}).get("restartCount", 0) == 0, "a moved port is not a restart"


def test_host_network_worker_deleted_mid_run(e2e: E2E) -> None:
    """Delete a host-network worker while the ranks run: the job restarts, the new attempt's workers get their
    ports (new ones: the attempt is part of the choice), the launcher of the new attempt reads them from the
    updated config, and the job succeeds."""
    before: dict[str, int] = {}
    started = time.monotonic()
    delete_worker_mid_run(e2e, "hn-restart", lambda command, env: host_network_job(
        "hn-restart", e2e.image, launcher_command=command, launcher_env=env),
        while_running=lambda: before.update({p["metadata"]["name"]: ssh_port(p) for p in workers(e2e, "hn-restart")}))
    e2e.record("host-network-worker-deleted-succeeded", time.monotonic() - started)
    after = assert_host_network_pi(e2e, "hn-restart")
    REPORT.setdefault("host_network", {})["restart ports"] = {"before": before, "after": after}
    assert len(before) == 2 and set(before.values()) != set(after.values()), (before, after)


def test_host_network_pytorch_ddp_master_port(e2e: E2E) -> None:
    """PyTorch DDP on the host network: MASTER_PORT is the port rank 0's pod holds (`mpiop-master`), not torch's
    29500, which two host-network jobs on one node would both bind."""
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", script_config_map())
    manifest = ddp_job("hn-ddp", e2e.image, worker_pod_spec={"hostNetwork": True})
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["hostNetwork"] = True
    manifest["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = "None"
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("hn-ddp", timeout=600)
    e2e.record("host-network-pytorch-ddp", time.monotonic() - started)
    assert_succeeded(job)
    worker0 = e2e.api.pod(e2e.ns, "hn-ddp-worker-0")
    assert worker0 is not None
    master = [p for p in worker0["spec"]["containers"][0]["ports"] if p["name"] == "mpiop-master"]
    assert len(master) == 1 and master[0]["hostPort"] != 29500, worker0["spec"]["containers"][0]["ports"]
    log = e2e.launcher_log("hn-ddp")
    identities = IDENTITY.findall(log)
    assert sorted(int(i[0]) for i in identities) == list(range(RANKS)), log
    assert {i[6] for i in identities} == {str(master[0]["hostPort"])}, log
    REPORT.setdefault("host_network", {})["ddp MASTER_PORT"] = master[0]["hostPort"]
