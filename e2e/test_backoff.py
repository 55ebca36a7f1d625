"""backoffLimit counts a launcher restarted in place, on a real node: kubeflow's pi example with its
launcher under `restartPolicy: OnFailure` and `backoffLimit: 1`. A launcher that keeps failing goes into
CrashLoopBackOff and its pod never reaches Failed; the job must fail anyway, saying why, and the same spec
with a command that works must still succeed."""

from __future__ import annotations

import re
import time

from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.raw import JSON
from testkit.e2e.kube import condition, is_true
from testkit.e2e.mpi import assert_pi, assert_succeeded
from testkit.e2e.session import E2E

# Open MPI refuses root without --allow-run-as-root, as in the report: the launcher exits 1 each run.
ROOT_REFUSED = "mpirun.openmpi has detected an attempt to run as root"


def on_failure_pi(name: str, image: str, command: list[str]) -> JSON:
    """kubeflow's v2beta1 pi example (cleanPodPolicy Running, TTL 60 s) with its Launcher under restartPolicy
    OnFailure and backoffLimit 1, on the locally built image."""
    manifest = pi_job(name, image, launcher_command=command,
                      runPolicy={"backoffLimit": 1, "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60})
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "OnFailure"
    return manifest


def test_crash_looping_launcher_fails_with_backoff_limit_exceeded(e2e: E2E) -> None:
    command = ["mpi-wait-hosts", "mpirun.openmpi", "-n", "4", "/usr/local/bin/pi-openmpi", SAMPLES]
    started = e2e.create_job(on_failure_pi("crash", e2e.image, command))
    job = e2e.wait_finished("crash", timeout=60)
    seconds = time.monotonic() - started
    e2e.record("on-failure-launcher-failed", seconds)
    failed = condition(job, "Failed") or {}
    print(f"\nFailed after {seconds:.1f} s: {failed.get('reason')}\n{failed.get('message')}")
    print(f"$ kubectl describe mpijob crash\n{e2e.node.kubectl('describe', 'mpijob', 'crash', '-n', e2e.ns)}")
    assert is_true(job, "Failed"), e2e.describe("crash")
    message = failed.get("message", "")
    assert failed.get("reason") == "BackoffLimitExceeded", message
    assert message.startswith(f"MPIJob {e2e.ns}/crash has failed (backoffLimit 1 exceeded: 2 failures"), message
    assert re.search(r": crash-launcher \(node [\w.-]+\) container launcher Error exit 1\b", message), message
    # The previous run's log (pods/log previous=true), read by the operator from the kubelet.
    assert "\nLast lines of crash-launcher/launcher:\n" in message and ROOT_REFUSED in message, message
    failure = (job.get("status") or {}).get("lastFailure") or {}
    assert (failure.get("pod"), failure.get("container"), failure.get("exitCode")) == (
        "crash-launcher", "launcher", 1), failure
    assert (job.get("status") or {}).get("restartCount") is None, "nothing was restarted but the container"
    reasons = [e["reason"] for e in e2e.api.events(e2e.ns) if e.get("type") == "Warning"]
    print(f"Warning Events: {reasons}")
    assert reasons.count("BackoffLimitExceeded") == 1, reasons


def test_crash_looping_worker_fails_with_backoff_limit_exceeded(e2e: E2E) -> None:
    """Workers under OnFailure count the same way: worker 1's sshd cannot start, the kubelet restarts it in
    place, and the job fails naming that worker instead of waiting for it forever."""
    manifest = on_failure_pi("wcrash", e2e.image, ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "-n",
                                                   "4", "/usr/local/bin/pi-openmpi", SAMPLES])
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "OnFailure"
    worker["template"]["spec"]["containers"][0]["command"] = [
        "sh", "-c", 'if [ "$(hostname)" = wcrash-worker-1 ]; then echo "sshd: no hostkeys available -- exiting."; '
                    "exit 255; fi; exec /usr/local/bin/mpi-sshd"]
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("wcrash", timeout=60)
    seconds = time.monotonic() - started
    e2e.record("on-failure-worker-failed", seconds)
    failed = condition(job, "Failed") or {}
    print(f"\nFailed after {seconds:.1f} s: {failed.get('reason')}\n{failed.get('message')}")
    assert is_true(job, "Failed"), e2e.describe("wcrash")
    message = failed.get("message", "")
    assert failed.get("reason") == "BackoffLimitExceeded", message
    blamed = (r": wcrash-worker-1 \(ranks 2-3, node [\w.-]+\) container worker Error exit 255; the attempt's logs are "
              r"kept in ConfigMap wcrash-attempt-0\n")
    assert re.search(blamed, message), message
    assert message.endswith("\nLast lines of wcrash-worker-1/worker:\nsshd: no hostkeys available -- exiting."), message


def test_launcher_that_heals_after_a_restart_in_place_succeeds(e2e: E2E) -> None:
    """The same spec, its launcher failing on its first run only (a marker in an emptyDir, which outlives the
    container): the restart in place counts 1 of backoffLimit 1, and the second run's pi makes it Succeeded."""
    run = (f"if [ ! -e /scratch/ran ]; then touch /scratch/ran; echo first run fails; exit 3; fi; "
           f"exec mpi-wait-hosts mpirun.openmpi --allow-run-as-root -n 4 /usr/local/bin/pi-openmpi {SAMPLES}")
    manifest = on_failure_pi("heals", e2e.image, ["sh", "-c", run])
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher.setdefault("volumes", []).append({"name": "scratch", "emptyDir": {}})
    launcher["containers"][0].setdefault("volumeMounts", []).append({"name": "scratch", "mountPath": "/scratch"})
    started = e2e.create_job(manifest)
    job = e2e.wait_finished("heals", timeout=120)
    e2e.record("on-failure-launcher-healed", time.monotonic() - started)
    events = [(e["reason"], e["message"]) for e in e2e.api.events(e2e.ns) if e.get("type") == "Warning"]
    print(f"\nWarning Events: {events}")
    assert_succeeded(job)
    assert_pi(e2e.launcher_log("heals"), "heals")
    pod = e2e.api.pod(e2e.ns, "heals-launcher") or {}
    [status] = pod["status"]["containerStatuses"]
    assert status["restartCount"] == 1, status  # (the kubelet drops the failed run's lastState once it is gone)
    assert not [reason for reason, _ in events if reason != "ContainerRestarted"], events
