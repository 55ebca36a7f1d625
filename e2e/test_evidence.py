"""A failed attempt's evidence on a real node: a worker dies mid-run, the job restarts and then Succeeds, and
ConfigMap `<job>-attempt-0` still holds mpirun's error from the first launcher and the dead worker's last
lines (both pods are gone by then): sshd's, killed under its ranks."""

from __future__ import annotations

import time

from devcluster.pi_job import pi_job
from testkit.e2e.kube import is_true
from testkit.e2e.restarts import POD_NAME, WORKER_DIES, first_attempt_runs
from testkit.e2e.session import E2E


def test_a_worker_killed_mid_run_leaves_its_and_mpiruns_last_words(e2e: E2E) -> None:
    script = first_attempt_runs("ev-launcher", WORKER_DIES, hold_exit=True)
    started = e2e.create_job(pi_job("ev", e2e.image, launcher_command=["sh", "-c", script],
                                    launcher_env=POD_NAME, runPolicy={"backoffLimit": 1}))
    job = e2e.wait_finished("ev", timeout=300)
    e2e.record("worker-killed-evidence-then-succeeded", time.monotonic() - started)
    assert is_true(job, "Succeeded"), f"{e2e.describe('ev')}\nlauncher log:\n{e2e.launcher_log('ev')}"
    assert (job.get("status") or {}).get("restartCount") == 1
    saved = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/configmaps/ev-attempt-0")
    data = saved["data"]
    print("\n$ kubectl describe configmap ev-attempt-0 (the last lines of each key)")
    for key in sorted(data):
        print(f"--- {key} ---\n" + "\n".join(data[key].splitlines()[-12:]))
    assert "ev-launcher.launcher.log" in data and "ev-worker-1.worker.log" in data, sorted(data)
    launcher = data["ev-launcher.launcher.log"]
    # mpirun's account, in the words of the phase it was in when the worker went (its daemons still reporting
    # in, or running the ranks): under load both are seen.
    assert any(words in launcher for words in ("ORTE has lost communication with a remote daemon",
                                               "ORTE was unable to reliably start one or more daemons",
                                               "PRTE has lost communication")), launcher[-2000:]
    assert "Connection to ev-worker-1." in launcher and "closed by remote host" in launcher, launcher[-2000:]
    assert "Received signal 3; terminating." in data["ev-worker-1.worker.log"]  # sshd's last words
    assert data["failure"].startswith(f"MPIJob {e2e.ns}/ev is restarting (restart 1 of backoffLimit 1): "
                                      "ev-worker-1 (ranks 2-3, node "), data["failure"]


# 5 s in, rank 3 kills its Open MPI daemon (its parent), not the pod: the worker stays Running, mpirun fails at
# once, and only mpirun's error names the worker whose daemon it lost.
DAEMON_DIES = ('if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then (sleep 5; kill -KILL $$PPID) & fi; '
               'exec /usr/local/bin/pi-openmpi 2000000 30')


def test_the_worker_mpirun_names_is_saved_though_it_did_not_fail(e2e: E2E) -> None:
    """The launcher's failure comes first and the worker never fails: its log is saved all the same, since the
    failure blames it."""
    script = first_attempt_runs("lf-launcher", DAEMON_DIES)
    e2e.create_job(pi_job("lf", e2e.image, launcher_command=["sh", "-c", script], launcher_env=POD_NAME,
                          runPolicy={"backoffLimit": 1}))
    job = e2e.wait_finished("lf", timeout=300)
    assert is_true(job, "Succeeded"), f"{e2e.describe('lf')}\nlauncher log:\n{e2e.launcher_log('lf')}"
    data = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/configmaps/lf-attempt-0")["data"]
    print("\n$ kubectl describe configmap lf-attempt-0 (the last lines of each key)")
    for key in sorted(data):
        print(f"--- {key} ---\n" + "\n".join(data[key].splitlines()[-8:]))
    assert data["failure"].startswith(f"MPIJob {e2e.ns}/lf is restarting (restart 1 of backoffLimit 1): worker "
                                      "lf-worker-1 (ranks 2-3, node "), data["failure"]
    assert sorted(data) == ["failure", "lf-launcher.launcher.log", "lf-worker-1.worker.log"], sorted(data)
    assert not data["lf-worker-1.worker.log"].startswith("(not readable"), data["lf-worker-1.worker.log"]
