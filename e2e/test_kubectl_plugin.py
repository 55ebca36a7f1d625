"""`kubectl mpijob` on the real node, each verb on a job that restarted once: worker 1 dies under rank 3 in
attempt 0, attempt 1 runs its ranks for a while, then succeeds. The session is printed and saved to
`.cache/e2e/kubectl-mpijob.txt`."""

from __future__ import annotations

import re

from devcluster.binaries import cache_dir
from devcluster.pi_job import pi_job
from testkit.e2e.kube import is_true, wait_for
from testkit.e2e.restarts import POD_NAME, WORKER_DIES, first_attempt_runs
from testkit.e2e.session import E2E
from testkit.plugin import kubectl_mpijob

TRANSCRIPT = cache_dir() / "e2e" / "kubectl-mpijob.txt"
# Attempt 1: every rank says where it runs, then holds the job Running while the verbs are shown.
RANKS_SAY = 'echo rank $$OMPI_COMM_WORLD_RANK on $$(hostname); sleep 45'


def test_every_verb_on_a_job_that_restarted_once(e2e: E2E) -> None:
    script = first_attempt_runs("km-launcher", WORKER_DIES, hold_exit=True, then=RANKS_SAY)
    e2e.create_job(pi_job("km", e2e.image, launcher_command=["sh", "-c", script], launcher_env=POD_NAME,
                          runPolicy={"backoffLimit": 1}))

    def second_attempt_running() -> bool:
        job = e2e.job("km") or {}
        status = job.get("status") or {}
        if status.get("restartCount") != 1 or not is_true(job, "Running"):
            return False
        return "rank 3 on km-worker-1" in e2e.api.logs(e2e.ns, "km-launcher-1")

    wait_for(second_attempt_running, 240, "attempt 1 of km running its ranks", describe=lambda: e2e.describe("km"))
    session: list[str] = []

    def run(*args: str) -> str:
        shown = kubectl_mpijob(e2e.node.kubeconfig, "-n", e2e.ns, *args)
        session.append(f"$ kubectl mpijob {' '.join(args)}\n{shown.stderr}{shown.stdout}")
        assert shown.returncode == 0, session[-1]
        return shown.stdout

    status = run("status", "km")
    assert re.search(r"^State: +Running$", status, re.M), status
    assert re.search(r"^Attempt: +1 \(restarts 1 of backoffLimit 1\)$", status, re.M), status
    assert f"Last failure:     MPIJob {e2e.ns}/km is restarting (restart 1 of backoffLimit 1): km-worker-1 " \
           "(ranks 2-3, node " in status, status

    rank3 = run("logs", "km", "--rank", "3")  # 2 slots a worker: attempt 1's worker 1, whose sshd runs rank 3
    assert rank3 == e2e.api.logs(e2e.ns, "km-worker-1", "worker"), rank3
    launcher = run("logs", "km")
    assert "rank 3 on km-worker-1" in launcher, launcher

    first_launcher = run("logs", "km", "--attempt", "0", "--launcher")  # kept for its log: the pod itself
    assert "Connection to km-worker-1." in first_launcher or "lost communication" in first_launcher, first_launcher
    first_rank3 = run("logs", "km", "--attempt", "0", "--rank", "3")  # that worker is gone: its ConfigMap
    assert "Received signal 3; terminating." in first_rank3, first_rank3
    assert "from ConfigMap km-attempt-0 key km-worker-1.worker.log" in session[-1], session[-1]

    attempts = run("attempts", "km").splitlines()
    assert attempts[0].split() == ["ATTEMPT", "STATE", "LAUNCHER", "AGE", "FAILURE", "LOGS"], attempts
    assert attempts[1].startswith("0 ") and "km-worker-1 (ranks 2-3, node" in attempts[1], attempts
    assert attempts[1].split()[1] == "Restarted" and attempts[1].endswith("km-attempt-0"), attempts
    assert attempts[2].split()[:3] == ["1", "Running", "km-launcher-1"], attempts

    where = run("exec", "km", "--rank", "3", "--", "hostname")
    assert where.strip() == "km-worker-1", where

    followed = run("logs", "km", "-f")  # streams until attempt 1's launcher ends (its ranks sleep 45 s)
    assert "rank 3 on km-worker-1" in followed, followed

    TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
    TRANSCRIPT.write_text("\n".join(session))
    print("\n" + "\n".join(session))
    job = e2e.wait_finished("km", timeout=240)
    assert is_true(job, "Succeeded"), e2e.describe("km")
