"""Real MPI programs through mpiop on a real node: each test checks the MPIJob's conditions and the
launcher's log. Times from creating the MPIJob to its final condition go to the e2e report."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from devcluster import images
from devcluster.pi_job import SAMPLES, pi_job
from testkit.e2e.kube import MPIJOBS, condition, is_true, wait_for
from testkit.e2e.mpi import (
    PI_LINE,
    RANK_LINE,
    assert_pi,
    assert_succeeded,
    delete_worker_mid_run,
    finalize_hang,
    mpich_pi_command,
)
from testkit.e2e.session import E2E, OPENMPI

OPENMPI_VERSION = re.compile(r"\((?:Open MPI|OpenRTE)\) (\d+)\.\d+\.\d+")  # 4.1: "mpirun (OpenRTE) 4.1.4"
EXPECTED_OPENMPI = {images.BOOKWORM.name: "4", images.TRIXIE.name: "5"}


def assert_openmpi_version(e2e: E2E, log: str) -> None:
    """The launcher's `mpirun --version` is the Open MPI the suite is about (4 on bookworm, 5 on trixie)."""
    match = OPENMPI_VERSION.search(log)
    assert match and match.group(1) == EXPECTED_OPENMPI[e2e.suite], log


@pytest.mark.parametrize("suite", OPENMPI)
def test_openmpi_pi(e2e: E2E) -> None:
    """Open MPI, 2 workers x 2 slots, as root: pi from 4 ranks on 2 hosts. The same spec on Open MPI 4.1
    (ORTE) and 5 (PRRTE's prterun): the launcher prints `mpirun --version` first."""
    command = ["sh", "-c", "mpirun.openmpi --version; exec mpi-wait-hosts mpirun.openmpi --allow-run-as-root -n 4 "
               f"/usr/local/bin/pi-openmpi {SAMPLES}"]
    started = e2e.create_job(pi_job("pi", e2e.image, launcher_command=command))
    job = e2e.wait_finished("pi")
    e2e.record("openmpi-pi", time.monotonic() - started)
    assert_succeeded(job)
    log = e2e.launcher_log("pi")
    e2e.report("openmpi_pi_launcher_log", log)
    assert_openmpi_version(e2e, log)
    assert_pi(log, "pi")


@pytest.mark.parametrize("suite", OPENMPI)
def test_openmpi_pi_non_root(e2e: E2E) -> None:
    """kubeflow's non-root shape: uid 1000 (mpiuser), no fsGroup, the SSH key mounted in its home; sshd runs
    unprivileged on 2222. The key files are root's with mode 0644 (0600 only in /root/.ssh, as kubeflow), which
    ssh accepts from a file the user does not own; with 0600 everywhere this failed with
    'Load key "/home/mpiuser/.ssh/id_rsa": Permission denied'."""
    command = ["sh", "-c", 'echo "launcher runs as $(id -un)"; exec mpi-wait-hosts mpirun.openmpi -n 4 '
               '/home/mpiuser/pi 2000000']
    manifest = pi_job("pi-nonroot", e2e.image, run_as_user=1000, launcher_command=command,
                      ssh_auth_mount_path="/home/mpiuser/.ssh")
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("pi-nonroot")
    e2e.record("openmpi-pi-non-root", time.monotonic() - started)
    assert_succeeded(job)
    log = e2e.launcher_log("pi-nonroot")
    assert "launcher runs as mpiuser" in log, log
    assert_pi(log, "pi-nonroot")


@pytest.mark.parametrize(("suite", "user"), [
    pytest.param(images.BOOKWORM.name, 0, id="bookworm"),
    pytest.param(images.TRIXIE.name, 0, id="trixie"),
    pytest.param(images.TRIXIE.name, 1000, id="trixie-non-root"),
])
def test_mpich_pi(e2e: E2E, user: int) -> None:
    """MPICH (Hydra): hostfile in host:slots form; pi from 4 ranks on 2 hosts. As root, and on trixie's MPICH
    also as uid 1000 (mpiuser, the key in its home, as test_openmpi_pi_non_root).

    kubeflow's manifest shape, nothing about DNS in it: Hydra's proxies on the workers connect back to the
    launcher by its bare hostname (`<job>-launcher`), which resolves because mpiop puts
    `<job>.<ns>.svc.cluster.local` in every pod's DNS search list (without it: 'unable to get host address').

    MPICH 4.0.2 may hang in MPI_Finalize after the result (mpich_pi_command): a hang before it restarts the
    job; what is checked is that it ends Succeeded with the right output; restarts and hangs (or a clean exit,
    which is what trixie's MPICH is watched for) are in the report.
    """
    manifest = pi_job("pi-mpich", e2e.image, implementation="MPICH", launcher_command=mpich_pi_command(),
                      run_as_user=user or None, ssh_auth_mount_path="/home/mpiuser/.ssh" if user else None,
                      runPolicy={"backoffLimit": 6})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("pi-mpich", timeout=420)
    restarts = (job.get("status") or {}).get("restartCount", 0)
    log = e2e.launcher_log("pi-mpich") if is_true(job, "Succeeded") else ""
    scenario = "mpich-pi-non-root" if user else "mpich-pi"
    e2e.record(f"{scenario} ({restarts} restarts, {finalize_hang(log)})", time.monotonic() - started)
    assert_succeeded(job)
    assert_pi(log, "pi-mpich")


def test_malformed_command_fails(e2e: E2E) -> None:
    """A launcher command mpirun rejects, backoffLimit 1: Failed, with the exit code in the message."""
    command = ["mpirun.openmpi", "--allow-run-as-root", "--no-such-option", "/usr/local/bin/pi-openmpi"]
    manifest = pi_job("bad", e2e.image, launcher_command=command, runPolicy={"backoffLimit": 1})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("bad")
    e2e.record("malformed-command-failed", time.monotonic() - started)
    assert is_true(job, "Failed"), job
    assert not is_true(job, "Succeeded"), job
    launcher = e2e.api.pod(e2e.ns, "bad-launcher")
    assert launcher is not None
    terminated = launcher["status"]["containerStatuses"][0]["state"]["terminated"]
    code = terminated["exitCode"]
    assert code != 0
    failed = condition(job, "Failed")
    assert failed is not None
    assert f"exit {code}" in failed["message"] or f"exit code {code}" in failed["message"], failed
    assert (job.get("status") or {}).get("restartCount", 0) >= 1, job  # backoffLimit 1: one retry first
    assert "no-such-option" in e2e.launcher_log("bad")


@pytest.mark.parametrize("suite", OPENMPI)
def test_worker_deleted_mid_run(e2e: E2E) -> None:
    """Delete a worker while the ranks run: the job restarts (Restarting) and then succeeds. Open MPI 5.0.7's
    prterun may exit 0 after losing the worker's daemon: mpiop still restarts, blaming the deleted worker."""
    started = time.monotonic()
    restarting = delete_worker_mid_run(e2e, "restart", lambda command, env: pi_job(
        "restart", e2e.image, launcher_command=command, launcher_env=env))
    e2e.record("worker-deleted-restarting-succeeded", time.monotonic() - started)
    print(f"\nRestarting: {restarting}")
    if e2e.suite == images.TRIXIE.name:
        # prterun names the node it lost ("Remote daemon ... on node restart-worker-1"), or exits 0 and mpiop
        # blames the worker deleted under it: with its node while the pod is still there, "gone" once it is not
        # (a loaded node showed the launcher's failure in that gap). orterun's last lines may be a help text naming
        # no node: then the launcher is blamed, with that text.
        assert re.search(r"worker restart-worker-1 \(ranks 2-3, (node |gone\))", restarting), restarting
    assert_pi(e2e.launcher_log("restart"), "restart")


def test_suspended_then_resumed(e2e: E2E) -> None:
    """Created with runPolicy.suspend: no pods while suspended; resumed, it runs to Succeeded."""
    started = e2e.create_job(pi_job("suspended", e2e.image, runPolicy={"suspend": True}))
    wait_for(lambda: is_true(e2e.job("suspended"), "Suspended"), 60, "the Suspended condition",
             describe=lambda: e2e.describe("suspended"))
    # Then until the operator is quiet (its queue empty, no request for 2 s): one that wrongly starts pods
    # has asked for them by then, however loaded the node.
    assert e2e.operator is not None
    asyncio.run(e2e.operator.settle(quiet=2.0, every=0.5, timeout=120, min_reconciles=1))
    assert e2e.api.pods(e2e.ns) == [], "pods exist while the job is suspended"
    resumed = time.monotonic()
    e2e.api.merge_patch(f"{MPIJOBS.format(ns=e2e.ns)}/suspended", {"spec": {"runPolicy": {"suspend": False}}})
    job = e2e.wait_finished("suspended")
    e2e.record("suspended-then-resumed (from resume)", time.monotonic() - resumed)
    e2e.record("suspended-then-resumed (from create)", time.monotonic() - started)
    assert_succeeded(job)
    assert not is_true(job, "Suspended"), job
    assert_pi(e2e.launcher_log("suspended"), "suspended")


@pytest.mark.parametrize("suite", OPENMPI)
def test_wait_for_workers_ready(e2e: E2E) -> None:
    """launcherCreationPolicy WaitForWorkersReady: the launcher appears only once every worker is Ready
    (sshd answering its readiness probe), so plain mpirun, without waiting for hosts, succeeds first time."""
    command = ["mpirun.openmpi", "--allow-run-as-root", "-n", "4", "/usr/local/bin/pi-openmpi", "2000000"]
    manifest = pi_job("ready", e2e.image, launcher_command=command, worker_readiness_probe=True,
                      launcherCreationPolicy="WaitForWorkersReady", runPolicy={"backoffLimit": 0})
    started = e2e.create_job(manifest)
    seen_unready_worker_without_launcher = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = {p["metadata"]["name"]: p for p in e2e.api.pods(e2e.ns)}
        workers = [p for n, p in pods.items() if "-worker-" in n]
        ready = [p for p in workers if is_true(p, "Ready")]
        if "ready-launcher" in pods:
            assert len(workers) == 2 and len(ready) == 2, "the launcher was created before every worker was Ready"
            break
        if workers and len(ready) < 2:
            seen_unready_worker_without_launcher = True
        time.sleep(0.2)  # poll interval: often enough to see the seconds while the workers are not Ready yet
    else:
        raise AssertionError(f"no launcher within 120s\n{e2e.describe('ready')}")
    job = e2e.wait_finished("ready")
    e2e.record("wait-for-workers-ready", time.monotonic() - started)
    assert seen_unready_worker_without_launcher, "never saw the window where workers exist but are not Ready"
    assert_succeeded(job)
    assert (job.get("status") or {}).get("restartCount", 0) == 0, job
    assert_pi(e2e.launcher_log("ready"), "ready")


@pytest.mark.parametrize("suite", OPENMPI)
def test_run_launcher_as_worker(e2e: E2E) -> None:
    """runLauncherAsWorker: the hostfile lists the launcher first (ranks 0-1 run in it, started by mpirun itself,
    no ssh), then the 2 workers: 6 ranks on 3 hosts. The launcher runs no sshd, so it is created once the
    workers are Ready (WaitForWorkersReady) rather than waiting for every host of the hostfile."""
    command = ["mpirun.openmpi", "--allow-run-as-root", "-n", "6", "/usr/local/bin/pi-openmpi", SAMPLES]
    manifest = pi_job("law", e2e.image, launcher_command=command, worker_readiness_probe=True,
                      launcherCreationPolicy="WaitForWorkersReady", runLauncherAsWorker=True,
                      runPolicy={"backoffLimit": 0})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("law")
    e2e.record("run-launcher-as-worker", time.monotonic() - started)
    assert_succeeded(job)
    log = e2e.launcher_log("law")
    match = PI_LINE.search(log)
    assert match and int(match.group(3)) == 6, log
    placed = dict(RANK_LINE.findall(log))
    assert sorted(int(r) for r in placed) == list(range(6)), log
    hosts = {int(rank): host for rank, host in placed.items()}
    assert {hosts[0], hosts[1]} == {"law-launcher"}, log
    assert {hosts[r] for r in range(2, 6)} == {"law-worker-0", "law-worker-1"}, log
