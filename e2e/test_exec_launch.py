"""Exec launch on the real node: no sshd anywhere. Open MPI's, MPICH's and Intel MPI's pi and PyTorch DDP from an
image with OpenSSH removed, as UID 1000870000 (in no /etc/passwd) on read-only root filesystems in a namespace
enforcing the restricted Pod Security Standard (testkit.e2e.exec_launch); the launcher's token execs into its own
job's worker and is refused another job's; a worker deleted mid-run restarts the job; and how long mpirun takes
to have every rank running, exec vs SSH, on the same node."""

from __future__ import annotations

import re
import time

import pytest

from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIImplementation, MPIJob
from mpiop.names import launcher_account_name
from testkit.e2e.exec_launch import UID, add_passwd, describe, exec_pi_job, finished, report, restricted_exec
from testkit.e2e.kube import wait_for
from testkit.e2e.mpi import (
    PI_LINE,
    assert_pi,
    assert_succeeded,
    delete_worker_mid_run,
    finalize_hang,
    mpich_pi_command,
)
from testkit.e2e.session import E2E, OPENMPI, REPORT, operator_process
from testkit.e2e.training import assert_trained, ddp_job, script_config_map

# mpirun's own start to every rank running: each rank process prints its start time, as seconds since the epoch.
RANKS_UP = ('t0=$(date +%s.%N); {mpirun} -n 4 sh -c \'echo "rank-started $(date +%s.%N)"\'; '
            'echo "mpirun-started $t0"')
STARTED = re.compile(r"^(rank|mpirun)-started (\d+\.\d+)$", re.M)


def ranks_up_seconds(log: str) -> float:
    """From mpirun's start to the last of its 4 ranks starting, read from the launcher's log."""
    starts = STARTED.findall(log)
    ranks = [float(t) for kind, t in starts if kind == "rank"]
    [mpirun] = [float(t) for kind, t in starts if kind == "mpirun"]
    assert len(ranks) == 4, log
    return max(ranks) - mpirun


def succeeded_launcher_log(e2e: E2E, manifest: JSON) -> str:
    """Run the job to its end, print what it shows and its launcher's log; the log, once it Succeeded."""
    name = manifest["metadata"]["name"]
    e2e.create_job(manifest)
    job = finished(e2e, name)
    report(e2e, name)
    log = e2e.launcher_log(name)
    print(log)
    assert_succeeded(job)
    return log


@pytest.mark.parametrize("suite", OPENMPI)
def test_openmpi_pi_without_sshd_as_any_uid(restricted: E2E, exec_images_imported: tuple[str, str]) -> None:
    """The job Succeeds with pi from 4 ranks on 2 workers, none of which has sshd or ssh: Open MPI 4 (ORTE's rsh
    agent) and 5 (PRRTE's ssh agent)."""
    e2e, image = restricted, exec_images_imported[0]
    script = ('echo "launcher uid $(id -u), ssh: $(command -v ssh sshd || echo none)"; '
              "/etc/mpi/kubexec.sh pi-worker-1 'echo kubexec reaches $(hostname)'; "
              + RANKS_UP.format(mpirun="timeout 60 mpirun.openmpi")
              + f"; exec mpirun.openmpi -n 4 /usr/local/bin/pi-openmpi {SAMPLES}")
    started = e2e.create_job(exec_pi_job("pi", image, script))
    job = finished(e2e, "pi")
    e2e.record("exec-openmpi-pi", time.monotonic() - started)
    report(e2e, "pi")
    log = e2e.launcher_log("pi")
    print(log)
    assert_succeeded(job)
    assert f"launcher uid {UID}, ssh: none" in log
    assert_pi(log, "pi")
    e2e.report("exec_ranks_up_seconds", round(ranks_up_seconds(log), 3))
    print(f"exec [{e2e.suite}]: mpirun start -> 4 ranks running {ranks_up_seconds(log):.3f} s")


def test_the_launchers_token_reaches_its_own_worker_only(restricted: E2E,
                                                         exec_images_imported: tuple[str, str]) -> None:
    """From inside a running exec launcher: exec into its own worker works; another job's worker is Forbidden."""
    e2e, image = restricted, exec_images_imported[0]
    e2e.create_job(exec_pi_job("other", image, "sleep 600"))
    wait_for(lambda: (e2e.api.pod(e2e.ns, "other-worker-0") or {}).get("status", {}).get("phase") == "Running",
             180, "other's worker to run", describe=lambda: e2e.describe("other"))
    script = ('/etc/mpi/kubexec.sh mine-worker-0 \'echo "own worker: exec into $(hostname) as uid $(id -u)"\'; '
              '"$MPIOP_KUBECTL" --cache-dir "$MPIOP_KUBECTL_CACHE" exec other-worker-0 -- true 2>&1 '
              '| sed "s/^/other job worker: /"; true')
    log = succeeded_launcher_log(e2e, exec_pi_job("mine", image, script))
    assert f"own worker: exec into mine-worker-0 as uid {UID}" in log
    forbidden = next(line for line in log.splitlines() if line.startswith("other job worker:"))
    account = launcher_account_name(MPIJob.model_validate(e2e.job("mine")))
    assert "Forbidden" in forbidden and f"system:serviceaccount:{e2e.ns}:{account}" in forbidden, log


# In the launcher: stdin through the agent, then an agent TERMed while its remote `sleep 300` runs. Counts the
# launcher's `kubectl exec` processes (from /proc: the image has no ps) before and after, for up to 10 s.
SIGNALS = r"""
kubectls() {
  for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$c" 2>/dev/null; echo; done | grep -c "^$MPIOP_KUBECTL .* exec "
}
echo hi | /etc/mpi/kubexec.sh sig-worker-0 'read -r line; echo "stdin reached $(hostname): $line"'
/etc/mpi/kubexec.sh sig-worker-0 'echo remote sleep runs; exec sleep 300' > /tmp/agent.out 2>&1 &
agent=$!
n=0
until grep -q 'remote sleep runs' /tmp/agent.out || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
cat /tmp/agent.out
echo "kubectl exec processes before TERM: $(kubectls)"
t0=$(date +%s.%N)
kill -TERM "$agent"
wait "$agent"
code=$?
echo "agent exit after TERM: $code in $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s"
n=0
while [ "$(kubectls)" -gt 0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
echo "kubectl exec processes after TERM: $(kubectls) (after $n waits of 0.1 s)"
/etc/mpi/kubexec.sh sig-worker-0 \
  'echo "worker sleeps left: $(grep -la "^sleep.300" /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"' < /dev/null
"""


@pytest.mark.parametrize("suite", OPENMPI)
def test_a_stopped_agent_stops_its_kubectl_and_stdin_passes(restricted: E2E,
                                                            exec_images_imported: tuple[str, str]) -> None:
    """kubexec.sh passes its stdin to the remote command, and a TERM to it (mpirun aborting stops its launch
    agents so) ends its kubectl: the agent exits with kubectl's code and no kubectl is left in the launcher."""
    e2e, image = restricted, exec_images_imported[0]
    log = succeeded_launcher_log(e2e, exec_pi_job("sig", image, SIGNALS))
    assert "stdin reached sig-worker-0: hi" in log, log
    assert "remote sleep runs" in log and "kubectl exec processes before TERM: 1" in log, log
    assert re.search(r"^agent exit after TERM: 143 in ", log, re.M), log
    assert re.search(r"^kubectl exec processes after TERM: 0 ", log, re.M), log


def test_ssh_launch_ranks_up_for_comparison(e2e: E2E) -> None:
    """The same measure under SSH (root, the MPI image with sshd), after the workers' sshd answers."""
    script = (RANKS_UP.format(mpirun="mpirun.openmpi --allow-run-as-root"))
    started = e2e.create_job(pi_job("sshpi", e2e.image, launcher_command=["mpi-wait-hosts", "sh", "-c", script]))
    job = e2e.wait_finished("sshpi")
    e2e.record("ssh-ranks-up", time.monotonic() - started)
    log = e2e.launcher_log("sshpi")
    assert_succeeded(job)
    REPORT["ssh_ranks_up_seconds"] = round(ranks_up_seconds(log), 3)
    print(f"ssh: mpirun start -> 4 ranks running {ranks_up_seconds(log):.3f} s")


# Hydra's proxies connect back to the launcher by name: mpiexec starts once the launcher's own record is in DNS
# (as e2e/test_training.py's Intel MPI test does).
OWN_NAME_IN_DNS = ("timeout 120 sh -c 'until getent -s dns hosts \"$(hostname -f)\" >/dev/null; do sleep 0.5; "
                   "done'; ")


def hydra_pi(e2e: E2E, image: str, implementation: MPIImplementation, command: str) -> None:
    """MPICH's and Intel MPI's Hydra, pointed at kubexec.sh (rsh bootstrap), in the same restricted shape."""
    name = f"pi-{implementation.lower()}"
    started = e2e.create_job(exec_pi_job(name, image, OWN_NAME_IN_DNS + command, implementation,
                                         runPolicy={"backoffLimit": 3}))
    job = finished(e2e, name, timeout=420)
    report(e2e, name)
    restarts = (job.get("status") or {}).get("restartCount", 0)
    log = e2e.launcher_log(name)
    print(log)
    e2e.record(f"exec-{name} ({restarts} restarts, {finalize_hang(log)})", time.monotonic() - started)
    assert_succeeded(job)
    assert_pi(log, name)


def test_mpich_pi_without_sshd(restricted: E2E, exec_images_imported: tuple[str, str]) -> None:
    hydra_pi(restricted, exec_images_imported[0], "MPICH", mpich_pi_command()[-1])


def test_intel_mpi_pi_without_sshd(restricted: E2E, exec_images_imported: tuple[str, str]) -> None:
    hydra_pi(restricted, exec_images_imported[0], "Intel", f"exec mpiexec.hydra -n 4 /usr/local/bin/pi-intel {SAMPLES}")


def test_pytorch_ddp_without_sshd(restricted: E2E, exec_images_imported: tuple[str, str]) -> None:
    """DDP over gloo, 2 workers x 2 slots, `mpirun -n 4 python3 train_ddp.py` started through kubexec.sh: the same
    checks as under SSH (forwarded presets, loss, parameters equal to the single-process reference)."""
    e2e, image = restricted, exec_images_imported[0]
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", script_config_map())
    started = e2e.create_job(restricted_exec(ddp_job("ddp", image, mpirun=("mpirun.openmpi",),
                                                     runPolicy={"backoffLimit": 1})))
    job = finished(e2e, "ddp", timeout=600)
    e2e.record("exec-pytorch-ddp", time.monotonic() - started)
    report(e2e, "ddp")
    log = e2e.launcher_log("ddp")
    print(log)
    assert_succeeded(job)
    assert_trained(e2e, "ddp", log)


def test_worker_deleted_mid_run_restarts_the_job(restricted: E2E, exec_images_imported: tuple[str, str]) -> None:
    """A worker deleted while its ranks run under exec: Restarting, then Succeeded, as under SSH."""
    e2e, image = restricted, exec_images_imported[0]
    message = delete_worker_mid_run(e2e, "restart", lambda command, env: restricted_exec(pi_job(
        "restart", image, launcher_command=command, launcher_env=env, runPolicy={"backoffLimit": 3})),
        wait_hosts=())
    print(f"Restarting: {message}")
    report(e2e, "restart")
    print(describe(e2e, "restart"))


@pytest.mark.xdist_group("host-network")  # on the node's network: test_hostnetwork.py says why
def test_host_network_pi_without_sshd(bare: E2E, exec_images_imported: tuple[str, str]) -> None:
    """Both templates on the host network under exec (in a namespace that allows it: the baseline and restricted
    standards forbid the host network). Every pod has the node's hostname there, so each rank prints the
    MPIOP_SSH_PORT of the pod it runs in (each host-network worker has its own): 2 ranks in each worker."""
    add_passwd(bare)
    image, kubectl = exec_images_imported
    script = ("mpirun.openmpi -n 4 sh -c "
              "'echo \"rank $OMPI_COMM_WORLD_RANK in the pod of port ${MPIOP_SSH_PORT:-none}\"'; "
              f"exec mpirun.openmpi -n 4 /usr/local/bin/pi-openmpi {SAMPLES}")
    manifest = exec_pi_job("hn", image, script)
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["spec"]["hostNetwork"] = True
    with operator_process(bare, "--kubectl-image", kubectl):
        bare.create_job(manifest)
        job = finished(bare, "hn")
        report(bare, "hn")
        log = bare.launcher_log("hn")
    print(log)
    assert_succeeded(job)
    pi = PI_LINE.search(log)
    assert pi and abs(float(pi.group(1)) - 3.14159) < 0.01 and int(pi.group(3)) == 4, log
    ports = re.findall(r"^rank \d+ in the pod of port (\S+)$", log, re.M)
    assert sorted(ports.count(p) for p in set(ports)) == [2, 2] and "none" not in ports, log
