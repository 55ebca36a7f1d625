"""A hung rank on a real node: every pod Running, mpirun waiting forever. With a 30 s progress deadline the job is
caught as Stalled within the deadline (mpiop wakes the job at it, not at the next resync), restarted once with
every rank's log kept in `<job>-attempt-0`, and Failed with reason Stalled past backoffLimit 1."""

from __future__ import annotations

import datetime as dt
import re
import time

from devcluster.pi_job import pi_job
from testkit.e2e.kube import condition, is_true, wait_for
from testkit.e2e.session import E2E

DEADLINE = 30
RESYNC_SECONDS = 300  # the operator's --resync-seconds default: the wake-up the job would get without the deadline's
# Rank 3 never reaches MPI_Init: the other ranks wait for it in the first collective, as in a hung allreduce.
HANG = ('echo "rank $OMPI_COMM_WORLD_RANK on $(hostname) starting"; '
        'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then echo "rank 3 hangs"; exec sleep 100000; fi; '
        'exec /usr/local/bin/pi-openmpi 2000000 30')
# The launcher says it is up before it waits for the workers' DNS and sshd (mpi-wait-hosts): its log is never
# empty, whether or not mpirun had started the ranks when the deadline passed.
MPIRUN = ["sh", "-c", 'echo "launcher up on $(hostname)"; exec "$@"', "sh",
          "mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "-n", "4", "sh", "-c", HANG]


def _time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def test_a_hung_rank_is_stalled_restarted_once_then_failed(e2e: E2E) -> None:
    manifest = pi_job("hang", e2e.image, launcher_command=MPIRUN, runPolicy={"backoffLimit": 1})
    manifest["metadata"]["annotations"] = {"mpiop.kubeflow.org/progress-deadline-seconds": str(DEADLINE)}
    started = e2e.create_job(manifest)

    def restarted() -> dict[str, object] | None:
        job = e2e.job("hang") or {}
        return job if (job.get("status") or {}).get("restartCount") == 1 else None

    job = wait_for(restarted, 180, "the stalled attempt restarted", describe=lambda: e2e.describe("hang"))
    restart_seconds = time.monotonic() - started
    restarting = condition(job, "Restarting") or {}
    message = str(restarting.get("message", ""))
    print(f"\nrestarted after {restart_seconds:.1f} s:\n{message}")
    since = re.search(r"all ranks running since (\S+)\)", message)
    assert since is not None, message
    detected = _time(str((job.get("status") or {})["lastFailure"]["time"]))  # type: ignore[index]
    silence = (detected - _time(since.group(1))).total_seconds()
    print(f"all ranks running at {since.group(1)}, Stalled seen at {detected:%H:%M:%S}: {silence:.0f} s of silence "
          f"for a {DEADLINE} s deadline (resync every {RESYNC_SECONDS} s)")
    assert DEADLINE <= silence < RESYNC_SECONDS, "woken at the deadline, not by the resync"
    assert (job.get("status") or {})["lastFailure"]["reason"] == "Stalled"  # type: ignore[index]

    saved = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/configmaps/hang-attempt-0")["data"]
    print("$ kubectl describe configmap hang-attempt-0 (the last lines of each key)")
    for key in sorted(saved):
        print(f"--- {key} ---\n" + "\n".join(saved[key].splitlines()[-6:]))
    assert sorted(saved) == ["failure", "hang-launcher.launcher.log", "hang-worker-0.worker.log",
                             "hang-worker-1.worker.log"], sorted(saved)
    launcher_log = saved["hang-launcher.launcher.log"]
    assert "launcher up on hang-launcher" in launcher_log, launcher_log[-2000:]
    # The clock starts when every pod runs; on a slow node mpirun may not have started the ranks 30 s later (its
    # workers' DNS records or sshd not there yet: seen once in CI), and then there is no rank's line to keep.
    if "starting" in launcher_log:
        assert "rank 3 hangs" in launcher_log, launcher_log[-2000:]
    else:
        print("the ranks had not started when the deadline passed: the launcher's log holds its own line only")
    for worker in ("hang-worker-0.worker.log", "hang-worker-1.worker.log"):
        assert not saved[worker].startswith("(not readable"), saved[worker]

    job = e2e.wait_finished("hang", timeout=180)
    failed = condition(job, "Failed") or {}
    print(f"Failed after {time.monotonic() - started:.1f} s: {failed.get('reason')}\n{failed.get('message')}")
    e2e.record("hung-rank-stalled-restarted-failed", time.monotonic() - started)
    assert is_true(job, "Failed") and failed.get("reason") == "Stalled", e2e.describe("hang")
    assert str(failed.get("message", "")).startswith(f"MPIJob {e2e.ns}/hang has failed (backoffLimit 1 reached "
                                                     "after 1 restarts): no progress for ")
