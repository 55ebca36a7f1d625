"""Real MPI programs through mpiop on a real node: each test checks the MPIJob's conditions and the
launcher's log. Times from creating the MPIJob to its final condition go to the e2e report."""

from __future__ import annotations

import time

from devcluster.pi_job import pi_job
from testkit.e2e.kube import MPIJOBS, condition, is_true, wait_for
from testkit.e2e.mpi import (
    assert_pi,
    assert_succeeded,
    delete_worker_mid_run,
    finalize_hang,
    mpich_pi_command,
)
from testkit.e2e.session import E2E, REPORT


def test_openmpi_pi(e2e: E2E) -> None:
    """Open MPI, 2 workers x 2 slots, as root: pi from 4 ranks on 2 hosts."""
    started = e2e.create_job(pi_job("pi", e2e.image))
    job = e2e.wait_finished("pi")
    e2e.record("openmpi-pi", time.monotonic() - started)
    assert_succeeded(job)
    log = e2e.launcher_log("pi")
    REPORT["openmpi_pi_launcher_log"] = log
    assert_pi(log, "pi")


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


def test_mpich_pi(e2e: E2E) -> None:
    """MPICH (Hydra): hostfile in host:slots form; pi from 4 ranks on 2 hosts.

    kubeflow's manifest shape, nothing about DNS in it: Hydra's proxies on the workers connect back to the
    launcher by its bare hostname (`<job>-launcher`), which resolves because mpiop puts
    `<job>.<ns>.svc.cluster.local` in every pod's DNS search list (without it: 'unable to get host address').

    MPICH 4.0.2 may hang in MPI_Finalize after the result (mpich_pi_command): a hang before it restarts the
    job; what is checked is that it ends Succeeded with the right output; restarts and hangs are in the report.
    """
    manifest = pi_job("pi-mpich", e2e.image, implementation="MPICH", launcher_command=mpich_pi_command(),
                      runPolicy={"backoffLimit": 6})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("pi-mpich", timeout=420)
    restarts = (job.get("status") or {}).get("restartCount", 0)
    log = e2e.launcher_log("pi-mpich") if is_true(job, "Succeeded") else ""
    e2e.record(f"mpich-pi ({restarts} restarts, {finalize_hang(log)})", time.monotonic() - started)
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


def test_worker_deleted_mid_run(e2e: E2E) -> None:
    """Delete a worker while the ranks run: the job restarts (Restarting) and then succeeds."""
    started = time.monotonic()
    delete_worker_mid_run(e2e, "restart", lambda command, env: pi_job(
        "restart", e2e.image, launcher_command=command, launcher_env=env))
    e2e.record("worker-deleted-restarting-succeeded", time.monotonic() - started)
    assert_pi(e2e.launcher_log("restart"), "restart")


def test_suspended_then_resumed(e2e: E2E) -> None:
    """Created with runPolicy.suspend: no pods while suspended; resumed, it runs to Succeeded."""
    started = e2e.create_job(pi_job("suspended", e2e.image, runPolicy={"suspend": True}))
    wait_for(lambda: is_true(e2e.job("suspended"), "Suspended"), 60, "the Suspended condition",
             describe=lambda: e2e.describe("suspended"))
    time.sleep(3)  # long enough for an operator that wrongly starts pods to have started some
    assert e2e.api.pods(e2e.ns) == [], "pods exist while the job is suspended"
    resumed = time.monotonic()
    e2e.api.merge_patch(f"{MPIJOBS.format(ns=e2e.ns)}/suspended", {"spec": {"runPolicy": {"suspend": False}}})
    job = e2e.wait_finished("suspended")
    e2e.record("suspended-then-resumed (from resume)", time.monotonic() - resumed)
    e2e.record("suspended-then-resumed (from create)", time.monotonic() - started)
    assert_succeeded(job)
    assert not is_true(job, "Suspended"), job
    assert_pi(e2e.launcher_log("suspended"), "suspended")


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
        time.sleep(0.2)
    else:
        raise AssertionError(f"no launcher within 120s\n{e2e.describe('ready')}")
    job = e2e.wait_finished("ready")
    e2e.record("wait-for-workers-ready", time.monotonic() - started)
    assert seen_unready_worker_without_launcher, "never saw the window where workers exist but are not Ready"
    assert_succeeded(job)
    assert (job.get("status") or {}).get("restartCount", 0) == 0, job
    assert_pi(e2e.launcher_log("ready"), "ready")
