"""`kubectl mpijob` against the real apiserver, run as kubectl runs it (the installed `kubectl-mpijob` found on
PATH by the pinned kubectl): a job that restarted once, its objects written as mpiop writes them (status, the
hostfile ConfigMap, attempt 0's logs ConfigMap); no kubelet, so logs are read from the ConfigMap."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.v2beta1 import FailureInfo, JobCondition, JobStatus, MPIJob
from mpiop.desired import evidence, objects, pods
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, KubeClient
from testkit.mpijobs import make_mpijob
from testkit.plugin import kubectl_mpijob as run_plugin
from testkit.plugin import plugin_env

SUMMARY = ("MPIJob {ns}/pi is restarting (restart 1 of backoffLimit 6): pi-worker-1 (ranks 2-3, node node-b) "
           "container main Error exit 1; the attempt's logs are kept in ConfigMap pi-attempt-0")
LAUNCHER_LOG = "mpirun noticed that process rank 3 with PID 22 on node pi-worker-1 exited on signal 9 (Killed).\n"
WORKER_LOG = "Received signal 3; terminating.\n"


async def kubectl_mpijob(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run_plugin, plane.kubeconfig, *args)


@pytest.fixture
async def restarted(kube: KubeClient, mpijob_crd: str, namespace: str) -> MPIJob:
    """Job pi (2 workers x 2 slots) at attempt 1, Running, after worker 1 failed attempt 0; the pods are gone."""
    created = await kube.create(MPIJOBS, namespace, make_mpijob("pi", namespace).workers(2).slots(2).manifest())
    job = MPIJob.model_validate(created)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    summary = SUMMARY.format(ns=namespace)
    status = JobStatus(
        conditions=[
            JobCondition(type="Created", status="True", reason="MPIJobCreated", last_transition_time=now),
            JobCondition(type="Restarting", status="False", reason="MPIJobRunning", message="running",
                         last_transition_time=now),
            JobCondition(type="Running", status="True", reason="MPIJobRunning", last_transition_time=now),
        ],
        restart_count=1, attempt_start_time=now, excluded_nodes=["node-b"],
        last_failure=FailureInfo(reason="Error", pod="pi-worker-1", container="main", exit_code=1, node="node-b",
                                 ranks="2-3", attempt=0, time=now),
    )
    await kube.patch(MPIJOBS, namespace, "pi", {"status": status.to_json()}, subresource="status")
    await kube.create(CONFIGMAPS, namespace, objects.config_map(job, [0, 1]))
    await kube.create(CONFIGMAPS, namespace, evidence.config_map(
        job, 0, summary, [(evidence.log_key("pi-launcher", "main"), LAUNCHER_LOG),
                          (evidence.log_key("pi-worker-1", "main"), WORKER_LOG)]))
    return job


async def test_kubectl_finds_the_plugin_and_every_verb_has_help(control_plane: ControlPlane) -> None:
    listed = await asyncio.to_thread(subprocess.run, ["kubectl", "plugin", "list"], capture_output=True, text=True,
                                     env=plugin_env(control_plane.kubeconfig), check=False)
    assert "kubectl-mpijob" in listed.stdout, listed
    for verb in ("status", "attempts", "logs", "exec"):
        shown = await kubectl_mpijob(control_plane, verb, "--help")
        assert shown.returncode == 0 and f"Usage: kubectl mpijob {verb} [OPTIONS] NAME" in shown.stdout, shown


async def test_status(control_plane: ControlPlane, restarted: MPIJob, namespace: str) -> None:
    shown = await kubectl_mpijob(control_plane, "status", "pi", "-n", namespace)
    print(f"$ kubectl mpijob status pi\n{shown.stdout}")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "State:            Running\n" in out
    assert "Attempt:          1 (restarts 1 of backoffLimit 6)\n" in out
    assert "Excluded nodes:   node-b\n" in out
    assert "Milestones:\n  MILESTONE          AGE   REASON\n  Created            " in out
    assert f"Last failure:     {SUMMARY.format(ns=namespace)}\n" in out


async def test_attempts(control_plane: ControlPlane, restarted: MPIJob, namespace: str) -> None:
    shown = await kubectl_mpijob(control_plane, "-n", namespace, "attempts", "pi")
    print(f"$ kubectl mpijob attempts pi\n{shown.stdout}")
    assert shown.returncode == 0, shown.stderr
    header, first, current = shown.stdout.splitlines()
    assert header.split() == ["ATTEMPT", "STATE", "LAUNCHER", "AGE", "FAILURE", "LOGS"]
    assert first.startswith("0 ") and "Restarted" in first and first.endswith("   pi-attempt-0")
    assert "pi-worker-1 (ranks 2-3, node node-b) container main Error exit 1" in first
    assert current.split() == ["1", "Running", "<none>", "<none>", "<none>", "<none>"]


@pytest.mark.parametrize(("which", "log", "key"), [
    (["--launcher"], LAUNCHER_LOG, "pi-launcher.main.log"),
    ([], LAUNCHER_LOG, "pi-launcher.main.log"),
    (["--rank", "3"], WORKER_LOG, "pi-worker-1.main.log"),  # 2 slots a worker: ranks 2-3 on worker 1
    (["--worker", "1"], WORKER_LOG, "pi-worker-1.main.log"),
])
async def test_a_past_attempts_logs_from_its_config_map(control_plane: ControlPlane, restarted: MPIJob,
                                                        namespace: str, which: list[str], log: str,
                                                        key: str) -> None:
    shown = await kubectl_mpijob(control_plane, "logs", "pi", "-n", namespace, "--attempt", "0", *which)
    print(f"$ kubectl mpijob logs pi --attempt 0 {' '.join(which)}\n{shown.stderr}{shown.stdout}")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == log
    assert f"from ConfigMap pi-attempt-0 key {key}" in shown.stderr


@pytest.mark.parametrize(("args", "reason"), [
    (["status", "nope"], 'Error: mpijob "nope" not found in namespace "{ns}"'),
    (["attempts", "nope"], 'Error: mpijob "nope" not found in namespace "{ns}"'),
    (["logs", "nope", "--rank", "0"], 'Error: mpijob "nope" not found in namespace "{ns}"'),
    (["exec", "nope", "--rank", "0", "--", "true"], 'Error: mpijob "nope" not found in namespace "{ns}"'),
    (["logs", "pi", "--rank", "4"], "Error: mpijob pi: rank 4 is not in the hostfile (ranks 0-3)"),
    (["exec", "pi", "--rank", "9", "--", "true"], "Error: mpijob pi: rank 9 is not in the hostfile (ranks 0-3)"),
    (["logs", "pi", "--worker", "2"], "Error: worker 2 is not in mpijob pi (workers 0-1)"),
    (["logs", "pi", "--attempt", "2"], "Error: mpijob pi has no attempt 2 (attempts 0-1)"),
    (["logs", "pi", "--attempt", "0", "--worker", "0"],
     "Error: ConfigMap pi-attempt-0 has no log of pi-worker-0: it keeps the launcher's and the failed pods' "
     "(pi-launcher.main.log, pi-worker-1.main.log)"),
    (["logs", "pi", "--rank", "1"], 'Error: pod "pi-worker-0" of mpijob pi not found in namespace "{ns}" (attempt 1)'),
])
async def test_missing_things_are_one_line_and_a_failure(control_plane: ControlPlane, restarted: MPIJob,
                                                         namespace: str, args: list[str], reason: str) -> None:
    shown = await kubectl_mpijob(control_plane, "-n", namespace, *args)
    assert shown.returncode == 1, shown
    assert shown.stderr == reason.format(ns=namespace) + "\n"
    assert shown.stdout == ""


async def test_a_finished_jobs_cleaned_worker_points_at_the_launchers_log(control_plane: ControlPlane,
                                                                         kube: KubeClient, mpijob_crd: str,
                                                                         namespace: str) -> None:
    """`make run`'s pi once it Succeeded: cleanPodPolicy Running deleted its workers and kept the launcher, so
    `--rank 3` says so and names the log that has that rank's output, not only that the pod is gone."""
    created = await kube.create(MPIJOBS, namespace, make_mpijob("pi", namespace).workers(2).slots(2).manifest())
    job = MPIJob.model_validate(created)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    status = JobStatus(conditions=[
        JobCondition(type=kind, status="True", reason=f"MPIJob{kind}", last_transition_time=now)
        for kind in ("Created", "Running", "Succeeded")])
    await kube.patch(MPIJOBS, namespace, "pi", {"status": status.to_json()}, subresource="status")
    await kube.create(CONFIGMAPS, namespace, objects.config_map(job, [0, 1]))
    await kube.create(PODS, namespace, pods.launcher_pod(job, 0))
    shown = await kubectl_mpijob(control_plane, "logs", "pi", "-n", namespace, "--rank", "3")
    print(f"$ kubectl mpijob logs pi --rank 3\n{shown.stderr}")
    assert shown.returncode == 1 and shown.stdout == "", shown
    assert shown.stderr == (
        f'Error: pod "pi-worker-1" of mpijob pi not found in namespace "{namespace}" (attempt 0): the job Succeeded, '
        "and cleanPodPolicy Running deleted its pods still running. mpirun gathers every rank's output into the "
        f"launcher's log: kubectl mpijob logs pi -n {namespace} --launcher\n")


# The termination message: OSC 0 retitles an admin's terminal window, BEL ends it; then a line break and a
# right-to-left override, and a screen clear.
PWNED = "boom \x1b]0;pwned\x07... \u202eFAKE\x1b[2J"
PWNED_SHOWN = "boom \\x1b]0;pwned\\x07... \\u202eFAKE\\x1b[2J"


async def test_status_shows_a_tenants_termination_message_escaped(control_plane: ControlPlane, kube: KubeClient,
                                                                  mpijob_crd: str, namespace: str) -> None:
    """What 3cc6b1b's operator wrote (the report held the worker's termination message raw) and what a tenant may
    write itself (the attempt's ConfigMap, lastFailure through a pod's status.reason): the plugin prints none of it
    raw. 3cc6b1b printed the ESC and BEL of the Last failure line as they were."""
    created = await kube.create(MPIJOBS, namespace, make_mpijob("pi", namespace).workers(2).slots(2).manifest())
    job = MPIJob.model_validate(created)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    message = (f"MPIJob {namespace}/pi is restarting (restart 1 of backoffLimit 6): pi-worker-1 (ranks 2-3, node "
               f"node-b) container main Error exit 1: {PWNED}\nLast lines of pi-launcher/main:\n\x1b]0;again\x07")
    status = JobStatus(
        conditions=[
            JobCondition(type="Created", status="True", reason="MPIJobCreated", last_transition_time=now),
            JobCondition(type="Restarting", status="True", reason="MPIJobRestarting", message=message,
                         last_transition_time=now),
        ],
        restart_count=1, attempt_start_time=now,
        last_failure=FailureInfo(reason="OutOf\x1b[2Jx", pod="pi-worker-1", attempt=0, time=now),
    )
    await kube.patch(MPIJOBS, namespace, "pi", {"status": status.to_json()}, subresource="status")
    await kube.create(CONFIGMAPS, namespace, evidence.config_map(
        job, 0, f"MPIJob {namespace}/pi is restarting (restart 1 of backoffLimit 6): pi-worker-1 {PWNED}; then",
        [(evidence.log_key("pi-worker-1", "main"), WORKER_LOG)]))
    shown = await kubectl_mpijob(control_plane, "status", "pi", "-n", namespace)
    print(f"$ kubectl mpijob status pi\n{shown.stdout}")
    assert shown.returncode == 0, shown.stderr
    assert not any(c in shown.stdout for c in "\x1b\x07\u202e"), ascii(shown.stdout)
    assert (f"Last failure:     MPIJob {namespace}/pi is restarting (restart 1 of backoffLimit 6): pi-worker-1 "
            f"(ranks 2-3, node node-b) container main Error exit 1: {PWNED_SHOWN}\n") in shown.stdout
    table = await kubectl_mpijob(control_plane, "attempts", "pi", "-n", namespace)
    assert table.returncode == 0 and "\x1b" not in table.stdout and PWNED_SHOWN[:30] in table.stdout, table


@pytest.mark.parametrize("squatter", ["victim", "pi-worker-0"], ids=["another-pod", "a-pod-named-like-a-worker"])
@pytest.mark.parametrize("verb", [["exec", "pi", "--rank", "0", "--", "true"], ["logs", "pi", "--rank", "0"]],
                         ids=["exec", "logs"])
async def test_a_rank_the_hostfile_points_at_a_pod_the_job_does_not_control_is_refused(
        control_plane: ControlPlane, kube: KubeClient, restarted: MPIJob, namespace: str, squatter: str,
        verb: list[str]) -> None:
    """The hostfile ConfigMap is the namespace's to write: pointed at any pod, `exec --rank 0` ran the admin's
    command there (3cc6b1b: `kubectl exec ... victim`) and `logs --rank 0` read its log. A pod is a rank's only if
    the job controls it and it carries the job's labels; a pod named like a worker, with the job's labels and no
    owner, is no more the job's."""
    labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "pi",
              "mpiop.kubeflow.org/attempt": "1"} if squatter == "pi-worker-0" else {"app": "db"}
    await kube.create(PODS, namespace, {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": squatter, "labels": labels},
                                        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    hostfile = f"{squatter}.pi.{namespace}.svc slots=2\npi-worker-1.pi.{namespace}.svc slots=2\n"
    await kube.patch(CONFIGMAPS, namespace, "pi-config", {"data": {"hostfile": hostfile}})
    shown = await kubectl_mpijob(control_plane, "-n", namespace, *verb)
    print(f"$ kubectl mpijob {' '.join(verb)}\n{shown.stderr}")
    assert shown.returncode == 1 and shown.stdout == "", shown
    assert shown.stderr == (f'Error: pod "{squatter}" (rank 0) is not a pod of mpijob pi: it is not controlled by '
                            "the job or lacks its labels\n")


async def test_a_rank_the_hostfile_names_as_no_pod_is_refused_escaped(control_plane: ControlPlane, kube: KubeClient,
                                                                      restarted: MPIJob, namespace: str) -> None:
    await kube.patch(CONFIGMAPS, namespace, "pi-config", {"data": {"hostfile": "evil\x1b[2J slots=4\n"}})
    shown = await kubectl_mpijob(control_plane, "-n", namespace, "exec", "pi", "--rank", "0", "--", "true")
    assert shown.returncode == 1 and shown.stderr == (
        'Error: mpijob pi: the hostfile\'s host for rank 0 is "evil\\x1b[2J", not a pod name\n'), shown
