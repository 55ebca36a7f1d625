"""Why did my job fail, on a real node: a rank dies on a worker, mpirun fails the launcher, and
`kubectl describe mpijob` names the worker, its ranks and node, and shows the tail of mpirun's real error
(read by the operator through pods/log from the real kubelet)."""

from __future__ import annotations

import time

import pytest

from devcluster.pi_job import pi_job
from testkit.e2e.kube import condition, is_true
from testkit.e2e.session import E2E, OPENMPI


@pytest.mark.parametrize("suite", OPENMPI)
def test_a_rank_killed_on_a_worker_shows_mpiruns_error(e2e: E2E) -> None:
    """Rank 3 (the second slot of worker 1) is SIGKILLed while the ranks wait before reducing, as the OOM killer
    would kill it; backoffLimit 0. Every rank sleeps 60 s after MPI_Init; rank 3 is killed 5 s in. (`$$$$`: the
    kubelet turns `$$` in a command into `$`.)"""
    rank3_dies = ('if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then (sleep 5; kill -9 $$$$) & fi; '
                  "exec /usr/local/bin/pi-openmpi 2000000 60")
    command = ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "-n", "4", "sh", "-c", rank3_dies]
    started = e2e.create_job(pi_job("dies", e2e.image, launcher_command=command, runPolicy={"backoffLimit": 0}))
    job = e2e.wait_finished("dies", timeout=240)
    e2e.record("rank-killed-failed", time.monotonic() - started)
    describe = e2e.node.kubectl("describe", "mpijob", "dies", "-n", e2e.ns)
    print(f"\n$ kubectl describe mpijob dies\n{describe}")
    print(f"$ kubectl get mpij dies -o wide\n{e2e.node.kubectl('get', 'mpij', 'dies', '-n', e2e.ns, '-o', 'wide')}")
    assert is_true(job, "Failed"), f"{e2e.describe('dies')}\nlauncher log:\n{e2e.launcher_log('dies')}"
    message = (condition(job, "Failed") or {}).get("message", "")
    # The worker is blamed, with the ranks the hostfile put there and its node.
    assert message.startswith(f"MPIJob {e2e.ns}/dies has failed (backoffLimit 0 reached after 0 restarts): "
                              "worker dies-worker-1 (ranks 2-3, node "), message
    assert "then the launcher dies-launcher" in message, message
    # The tail of mpirun's own error, from the launcher's log.
    assert "\nLast lines of dies-launcher/launcher:\n" in message, message
    # Debian's binary is mpirun.openmpi: "mpirun.openmpi noticed that process rank 3 with PID 22 on node ...".
    assert "noticed that process rank 3 with PID" in message and "on node dies-worker-1" in message, message
    assert "noticed that process rank 3 with PID" in describe
    failure = (job.get("status") or {}).get("lastFailure") or {}
    assert (failure.get("reason"), failure.get("pod"), failure.get("ranks")) == ("RankFailed", "dies-worker-1", "2-3")
    events = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/events")["items"]
    warning = [e["message"] for e in events if e["reason"] == "MPIJobFailed"]
    assert len(warning) == 1 and len(warning[0]) <= 1024 and "noticed that process rank 3" in warning[0]
