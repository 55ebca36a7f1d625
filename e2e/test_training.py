"""Real allreduce training through mpiop: PyTorch DDP (gloo) under Open MPI's mpirun, and Intel MPI.

The training script is examples/pytorch/train_ddp.py, given to the pods in a ConfigMap. The manifest has
no rendezvous plumbing: MASTER_ADDR, MASTER_PORT and WORLD_SIZE come from mpiop's presets, forwarded by
mpirun to the ranks it starts over SSH. The test checks the launcher's log against a single-process run of
the same global batches that it runs itself (a plain Pod of the same image).
"""

from __future__ import annotations

import time

import pytest

from devcluster.pi_job import pi_job
from mpiop.api.raw import JSON
from testkit.e2e.kube import condition, is_true, wait_for
from testkit.e2e.mpi import assert_pi, assert_succeeded, log_or_empty
from testkit.e2e.session import E2E, OPENMPI, REPORT, operator_process
from testkit.e2e.training import RANKS, assert_trained, ddp_job, reference, script_config_map


@pytest.mark.parametrize("suite", OPENMPI)
def test_pytorch_ddp(e2e: E2E) -> None:
    """DDP over gloo, 2 workers x 2 slots, `mpirun -n 4 python3 train_ddp.py` and nothing else."""
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", script_config_map())
    started = e2e.create_job(ddp_job("ddp", e2e.image))
    reference(e2e)
    job = e2e.wait_finished("ddp", timeout=600)
    e2e.record("pytorch-ddp", time.monotonic() - started)
    assert_succeeded(job)
    log = e2e.launcher_log("ddp")
    e2e.report("pytorch_ddp_launcher_log", log)
    assert_trained(e2e, "ddp", log)
    # Every image's Python reaches the status endpoint: trixie's 3.13 verifies certificates strictly. Every epoch's:
    # the reference pod starts mid-training, and the node's bridge once took a new MAC from it (nodehost.bridge_mac),
    # after which the ranks' posts to the host timed out for the rest of the run.
    answered = [f"rank 0/4 epoch {epoch} reported: 202" in log for epoch in range(1, 11)]
    assert all(answered), f"epochs without a 202: {[e + 1 for e, ok in enumerate(answered) if not ok]}\n{log[-3000:]}"


def test_pytorch_ddp_worker_deleted(e2e: E2E) -> None:
    """A worker deleted mid-training: Restarting, then Succeeded with the same checks.

    The first attempt sleeps 0.5 s per step (TRAIN_STEP_SECONDS from a ConfigMap, forwarded to the ranks
    by the job's `mpiop.kubeflow.org/forward-env: TRAIN_*`); the test sets it to 0 before deleting."""
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", script_config_map())
    control = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-control"},
               "data": {"pause": "0.5"}}
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", control)
    env = [{"name": "TRAIN_STEP_SECONDS",
            "valueFrom": {"configMapKeyRef": {"name": "train-control", "key": "pause"}}}]
    manifest = ddp_job("ddp-restart", e2e.image, launcher_env=env,
                       annotations={"mpiop.kubeflow.org/forward-env": "TRAIN_*"}, runPolicy={"backoffLimit": 3})
    started = e2e.create_job(manifest)
    wait_for(lambda: "rank 0/4 step 20 " in log_or_empty(e2e, "ddp-restart"), 300, "training to be under way",
             describe=lambda: e2e.describe("ddp-restart"))
    e2e.api.merge_patch(f"/api/v1/namespaces/{e2e.ns}/configmaps/train-control", {"data": {"pause": "0"}})
    e2e.api.delete(f"/api/v1/namespaces/{e2e.ns}/pods/ddp-restart-worker-1")
    def restarting_job() -> JSON | None:
        job = e2e.job("ddp-restart")
        return job if is_true(job, "Restarting") else None

    restarting = wait_for(restarting_job, 120, "the Restarting condition",
                          describe=lambda: e2e.describe("ddp-restart"))
    assert "restart" in (condition(restarting, "Restarting") or {}).get("message", "").lower()
    job = e2e.wait_finished("ddp-restart", timeout=600)
    e2e.record("pytorch-ddp-worker-deleted", time.monotonic() - started)
    assert_succeeded(job)
    assert (job.get("status") or {}).get("restartCount", 0) >= 1, job
    log = e2e.launcher_log("ddp-restart")
    assert " step 20 " not in log, log  # the second attempt's log, at full speed
    assert_trained(e2e, "ddp-restart", log)


def test_pytorch_ddp_reports_progress_every_epoch(bare: E2E) -> None:
    """Rank 0 posts its progress to mpiop's status endpoint after each of 10 epochs (examples/pytorch/train_ddp.py,
    with mpiop/progress_client.py beside it): `kubectl get mpijob` shows PROGRESS rising and an ETA while it runs,
    and the finished job keeps the last report. 0.1 s a step, so the 300 steps take about 30 s."""
    bare.api.create(f"/api/v1/namespaces/{bare.ns}/configmaps", script_config_map())
    env = [{"name": "TRAIN_STEP_SECONDS", "value": "0.1"}]
    manifest = ddp_job("ddp-progress", bare.image, launcher_env=env,
                       annotations={"mpiop.kubeflow.org/forward-env": "TRAIN_*"}, runPolicy={"backoffLimit": 0})
    with operator_process(bare, "--status-write-seconds=2"):
        started = bare.create_job(manifest)
        seen: list[tuple[float, int, int | None]] = []

        def finished() -> JSON | None:
            job = bare.job("ddp-progress") or {}
            report = (job.get("status") or {}).get("trainerStatus") or {}
            if "progressPercentage" in report and (not seen or seen[-1][1] != report["progressPercentage"]):
                seen.append((time.monotonic() - started, report["progressPercentage"],
                             report.get("estimatedRemainingSeconds")))
                print(bare.node.kubectl("get", "mpijob", "ddp-progress", "-n", bare.ns), flush=True)
            return job if is_true(job, "Succeeded") or is_true(job, "Failed") else None

        job = wait_for(finished, 600, "ddp-progress to finish", describe=lambda: bare.describe("ddp-progress"))
        print(bare.node.kubectl("get", "mpijob", "ddp-progress", "-n", bare.ns, "-o", "wide"))
    bare.record("pytorch-ddp-progress", time.monotonic() - started)
    print("seconds after creation, PROGRESS, ETA:", seen)
    assert_succeeded(job)
    log = bare.launcher_log("ddp-progress")
    assert "rank 0/4 epoch 10 reported: 202" in log, log[-3000:]
    percents = [p for _, p, _ in seen]
    assert percents == sorted(percents) and len(set(percents)) >= 3, f"PROGRESS seen while running: {seen}"
    assert any(eta is not None and eta > 0 for _, p, eta in seen if p < 100), seen
    final = job["status"]["trainerStatus"]
    assert final["progressPercentage"] == 100 and {"name": "epoch", "value": "10"} in final["metrics"], final
    status = job["status"]
    assert status["firstProgressTime"] >= status["ranksRunningTime"] >= status["scheduledTime"], status


def test_intel_mpi_pi(e2e: E2E) -> None:
    """kubeflow's Intel MPI shape: mpiImplementation Intel, launcherCreationPolicy WaitForWorkersReady,
    workers Ready once sshd answers; Intel's mpiexec.hydra (impi-rt) runs pi on 4 ranks over 2 workers."""
    # Hydra's proxies on the workers connect back to the launcher by name, so mpiexec starts once the
    # launcher's own record is in DNS (its /etc/hosts knows it at once, the workers' resolver does not), as
    # kubeflow's Intel MPI image entrypoint does. Without this, a loaded node failed both attempts with
    # "getaddrinfo returned error -3 (Temporary failure in name resolution)".
    command = ["sh", "-c", "timeout 120 sh -c 'until getent -s dns hosts \"$(hostname -f)\" >/dev/null; do sleep 0.5; "
               f"done'; exec mpiexec.hydra -n {RANKS} /usr/local/bin/pi-intel 2000000"]
    manifest = pi_job("pi-intel", e2e.image, implementation="Intel", launcher_command=command,
                      worker_readiness_probe=True, launcherCreationPolicy="WaitForWorkersReady",
                      runPolicy={"backoffLimit": 1})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("pi-intel", timeout=420)
    e2e.record("intel-mpi-pi", time.monotonic() - started)
    log = e2e.launcher_log("pi-intel")
    REPORT["intel_mpi_pi_launcher_log"] = log
    assert_succeeded(job)
    assert_pi(log, "pi-intel")
