"""Why did my job fail? What a user sees in the condition, the Event and `kubectl get mpij -o wide`, through the
real apiserver, the test writing pod statuses as the kubelet does (bound to a node, terminated containers with
the runtime's reason, exit code and message). Log tails need a real kubelet: e2e/test_failure_insight.py.
"""

from __future__ import annotations

import asyncio

from devcluster.controlplane import ControlPlane
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.kube.client import PODS
from testkit.operator import Cluster, Operator, eventually, mpijob, start_pods
from testkit.plugin import kubectl_mpijob

START_ERROR = ('failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create '
               'failed: unable to start container process: error during container init: exec: "mpirunx": '
               'executable file not found in $PATH: unknown')


async def _exist(cluster: Cluster, names: set[str]) -> bool:
    return names <= set(await cluster.pods())


async def _attempt_deleted(cluster: Cluster, attempt: int, kept: str) -> bool:
    """Whether the attempt's pods are gone, the failed launcher `kept` aside. A bound pod being deleted waits for
    its kubelet to confirm: done here (grace period 0) for each. The operator deletes them after it writes the
    Restarting status, so "no pod terminating" alone can be seen before it has started."""
    pods = {name: pod for name, pod in (await cluster.pods()).items()
            if pod["metadata"]["labels"].get(names.ATTEMPT_LABEL) == str(attempt) and name != kept}
    for name, pod in pods.items():
        if pod["metadata"].get("deletionTimestamp"):
            await cluster.kube.request("DELETE", PODS.path(cluster.ns, name), query={"gracePeriodSeconds": 0})
    return not pods


async def _terminated(cluster: Cluster, pod: str, *, phase: str, reason: str, exit_code: int, message: str = "",
                      restarted: bool = False) -> None:
    """A container's end as the kubelet reports it; `restarted`: it died and runs again (restartPolicy OnFailure)."""
    terminated: JSON = {"exitCode": exit_code, "reason": reason, "startedAt": "2024-05-01T12:00:00Z",
                        "finishedAt": "2024-05-01T12:00:05Z", "containerID": "containerd://0"}
    if message:
        terminated["message"] = message
    state: JSON = {"running": {"startedAt": "2024-05-01T12:00:06Z"}} if restarted else {"terminated": terminated}
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if restarted else "False"}],
        "containerStatuses": [{
            "name": "main", "ready": restarted, "restartCount": 1 if restarted else 0, "image": "img", "imageID": "",
            "state": state, "lastState": {"terminated": terminated} if restarted else {},
        }],
    }
    await cluster.kube.patch(PODS, cluster.ns, pod, {"status": status}, subresource="status")


async def _events(cluster: Cluster, reason: str) -> list[str]:
    listed = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
    return [e["message"] for e in listed["items"] if e["reason"] == reason]


def _show(control_plane: ControlPlane, cluster: Cluster, name: str) -> str:
    """What `kubectl get mpij -o wide` prints (printed for the record)."""
    wide = control_plane.kubectl("get", "mpij", name, "-n", cluster.ns, "-o", "wide")
    print(f"\n$ kubectl get mpij {name} -o wide\n{wide}")
    return wide


async def test_oom_killed_worker(control_plane: ControlPlane, cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("oom", workers=2, slotsPerWorker=4))
    await start_pods(cluster, "oom", 2, nodes={"oom-launcher": "node-a", "oom-worker-0": "node-b",
                                                "oom-worker-1": "node-c"})
    await _terminated(cluster, "oom-worker-1", phase="Failed", reason="OOMKilled", exit_code=137)

    restarting = await eventually(lambda: cluster.condition("oom", "Restarting"), what="Restarting")
    message = (f"MPIJob {cluster.ns}/oom is restarting (restart 1 of backoffLimit 6): "
               "oom-worker-1 (ranks 4-7, node node-c) container main OOMKilled exit 137; the attempt's logs are kept "
               "in ConfigMap oom-attempt-0")
    print(f"\ncondition Restarting: {restarting['message']}")
    assert restarting["message"] == message
    assert await eventually(lambda: _events(cluster, "MPIJobRestarting"), what="the Event") == [message]
    job = await cluster.job("oom")
    assert job is not None
    assert job["status"]["lastFailure"] == {"reason": "OOMKilled", "pod": "oom-worker-1", "container": "main",
                                            "exitCode": 137, "node": "node-c", "ranks": "4-7", "attempt": 0,
                                            "time": job["status"]["lastFailure"]["time"]}
    wide = _show(control_plane, cluster, "oom").splitlines()
    assert wide[0].split() == ["NAME", "STATE", "WORKERS", "READY", "PROGRESS", "ETA", "AGE", "RESTARTS", "LAST",
                               "FAILURE", "FAILED", "POD", "ATTEMPT", "AGE", "EXCLUDED", "NODES", "SCHEDULED", "RANKS",
                               "RUNNING", "FIRST", "PROGRESS", "LAST", "PROGRESS"]
    assert wide[1].split()[:2] == ["oom", "Restarting"] and wide[1].split()[5:8] == ["1", "OOMKilled", "oom-worker-1"]


async def test_launcher_failing_because_a_worker_died(control_plane: ControlPlane, cluster: Cluster,
                                                      operator: Operator) -> None:
    """kubeflow/mpi-operator#90: the launcher fails while a worker (restartPolicy OnFailure) was OOM-killed and
    restarted in place; the worker is named, not the launcher."""
    await cluster.create_job(mpijob("dead", workers=2))
    await start_pods(cluster, "dead", 2, running=False,
                     nodes={"dead-launcher": "node-a", "dead-worker-0": "node-b", "dead-worker-1": "node-c"})
    await _terminated(cluster, "dead-worker-0", phase="Running", reason="OOMKilled", exit_code=137, restarted=True)
    await _terminated(cluster, "dead-launcher", phase="Failed", reason="Error", exit_code=1)

    restarting = await eventually(lambda: cluster.condition("dead", "Restarting"), what="Restarting")
    print(f"\ncondition Restarting: {restarting['message']}")
    message = (f"MPIJob {cluster.ns}/dead is restarting (restart 1 of backoffLimit 6): dead-worker-0 (rank 0, node "
               "node-b) container main OOMKilled exit 137; then the launcher dead-launcher (node node-a) container "
               "main Error exit 1; the failed launcher dead-launcher is kept for `kubectl logs`; the attempt's logs "
               "are kept in ConfigMap dead-attempt-0")
    assert restarting["message"] == message
    assert await eventually(lambda: _events(cluster, "MPIJobRestarting"), what="the Event") == [message]
    # The failed launcher stays (for `kubectl logs`) while the next attempt's runs under its own name.
    await eventually(lambda: _attempt_deleted(cluster, 0, kept="dead-launcher"), what="the attempt's pods deleted")
    await eventually(lambda: _exist(cluster, {"dead-launcher-1", "dead-worker-0", "dead-worker-1"}),
                     what="the next attempt")
    kept = await cluster.pod("dead-launcher")
    assert kept is not None and kept["status"]["phase"] == "Failed" and not kept["metadata"].get("deletionTimestamp")
    assert kept["metadata"]["labels"]["mpiop.kubeflow.org/attempt"] == "0"
    new = await cluster.pod("dead-launcher-1")
    assert new is not None and new["spec"]["hostname"] == "dead-launcher"
    job = await cluster.job("dead")
    assert job is not None and job["status"]["lastFailure"]["reason"] == "OOMKilled"
    _show(control_plane, cluster, "dead")


async def test_malformed_command(control_plane: ControlPlane, cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("mal", workers=1, launcher_command=["mpirunx", "/home/mpiuser/pi"],
                                    run_policy={"backoffLimit": 1}))
    await start_pods(cluster, "mal", 1, running=False, nodes={"mal-launcher": "node-a", "mal-worker-0": "node-b"})
    await _terminated(cluster, "mal-launcher", phase="Failed", reason="StartError", exit_code=128, message=START_ERROR)
    restarting = await eventually(lambda: cluster.condition("mal", "Restarting"), what="Restarting")
    print(f"\ncondition Restarting: {restarting['message']}")
    assert restarting["message"] == (
        f"MPIJob {cluster.ns}/mal is restarting (restart 1 of backoffLimit 1): mal-launcher (node node-a) container "
        f"main StartError exit 128: {START_ERROR}; the failed launcher mal-launcher is kept for `kubectl logs`; "
        "the attempt's logs are kept in ConfigMap mal-attempt-0")

    await eventually(lambda: _attempt_deleted(cluster, 0, kept="mal-launcher"), what="the attempt's pods deleted")
    await start_pods(cluster, "mal", 1, launcher="mal-launcher-1", running=False,
                     nodes={"mal-launcher-1": "node-a", "mal-worker-0": "node-b"})
    await _terminated(cluster, "mal-launcher-1", phase="Failed", reason="StartError", exit_code=128,
                      message=START_ERROR)
    failed = await eventually(lambda: cluster.condition("mal", "Failed"), what="Failed")
    print(f"condition Failed: {failed['message']}")
    message = (f"MPIJob {cluster.ns}/mal has failed (backoffLimit 1 reached after 1 restarts): mal-launcher-1 (node "
               f"node-a) container main StartError exit 128: {START_ERROR}; the attempt's logs are kept in ConfigMap "
               "mal-attempt-1")
    assert failed["message"] == message
    assert await eventually(lambda: _events(cluster, "MPIJobFailed"), what="the Event") == [message]
    describe = control_plane.kubectl("describe", "mpijob", "mal", "-n", cluster.ns)
    print(f"\n$ kubectl describe mpijob mal\n{describe}")
    assert "executable file not found in $PATH" in describe
    wide = _show(control_plane, cluster, "mal").splitlines()
    assert wide[1].split()[1] == "Failed" and wide[1].split()[5:8] == ["1", "StartError", "mal-launcher-1"]


async def _crash_looping(cluster: Cluster, pod: str, *, failures: int, exit_code: int) -> None:
    """The kubelet's view of a container whose `failures`-th run failed and that waits out its back-off."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [{
        "name": "main", "ready": False, "restartCount": failures - 1, "image": "img", "imageID": "",
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 10s restarting failed container=main pod={pod}"}},
        "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "containerID": "containerd://1",
                                     "startedAt": "2024-05-01T12:00:06Z", "finishedAt": "2024-05-01T12:00:07Z"}},
    }]}
    await cluster.kube.patch(PODS, cluster.ns, pod, {"status": status}, subresource="status")


async def test_crash_looping_launcher_under_on_failure(control_plane: ControlPlane, cluster: Cluster,
                                                       operator: Operator) -> None:
    """A launcher under restartPolicy OnFailure never reaches Failed, so each of its failed runs counts
    against backoffLimit (1): the first is told in the Running condition and a Warning Event, the second fails
    the job with BackoffLimitExceeded. Nothing else is restarted."""
    manifest = mpijob("loop", workers=1, run_policy={"backoffLimit": 1})
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "OnFailure"
    await cluster.create_job(manifest)
    await start_pods(cluster, "loop", 1, nodes={"loop-launcher": "node-a", "loop-worker-0": "node-b"})
    await _terminated(cluster, "loop-launcher", phase="Running", reason="Error", exit_code=1, restarted=True)
    note = "loop-launcher container main Error exit 1 (1 failed run, restarted in place); failure 1 of backoffLimit 1"
    events = await eventually(lambda: _events(cluster, "ContainerRestarted"), what="the ContainerRestarted Event")
    assert events == [f"MPIJob {cluster.ns}/loop: {note}"]
    running = await cluster.condition("loop", "Running")
    assert running is not None and running["message"] == f"MPIJob {cluster.ns}/loop is running; {note}"
    print(f"\ncondition Running: {running['message']}")

    await _crash_looping(cluster, "loop-launcher", failures=2, exit_code=1)
    failed = await eventually(lambda: cluster.condition("loop", "Failed"), what="Failed")
    print(f"condition Failed: {failed['message']}")
    assert failed["reason"] == "BackoffLimitExceeded"
    message = (f"MPIJob {cluster.ns}/loop has failed (backoffLimit 1 exceeded: 2 failures after 0 restarts, 2 of "
               "them restarted in place): loop-launcher (node node-a) container main Error exit 1; the attempt's logs "
               "are kept in ConfigMap loop-attempt-0")
    assert failed["message"] == message, "no kubelet here to read the previous run's log from"
    assert await eventually(lambda: _events(cluster, "BackoffLimitExceeded"), what="the Event") == [message]
    job = await cluster.job("loop")
    assert job is not None and job["status"].get("restartCount") is None
    assert {k: job["status"]["lastFailure"].get(k) for k in ("reason", "pod", "container", "exitCode")} == {
        "reason": "Error", "pod": "loop-launcher", "container": "main", "exitCode": 1}
    describe = control_plane.kubectl("describe", "mpijob", "loop", "-n", cluster.ns)
    print(f"\n$ kubectl describe mpijob loop\n{describe}")
    assert "ContainerRestarted" in describe and "BackoffLimitExceeded" in describe


async def test_a_termination_message_reaches_the_condition_the_event_and_the_plugin_escaped(
        control_plane: ControlPlane, cluster: Cluster, operator: Operator) -> None:
    """A container writes its termination message: 3cc6b1b put its ESC and BEL raw into the condition and the Event
    (`kubectl describe` prints both raw) and `kubectl mpijob status` printed them to the admin's terminal."""
    await cluster.create_job(mpijob("esc", workers=2))
    await start_pods(cluster, "esc", 2, nodes={"esc-launcher": "node-a", "esc-worker-0": "node-b",
                                                "esc-worker-1": "node-c"})
    await _terminated(cluster, "esc-worker-1", phase="Failed", reason="Error", exit_code=1,
                      message="boom \x1b]0;pwned\x07... \u202eFAKE")
    restarting = await eventually(lambda: cluster.condition("esc", "Restarting"), what="Restarting")
    message = (f"MPIJob {cluster.ns}/esc is restarting (restart 1 of backoffLimit 6): esc-worker-1 (rank 1, node "
               "node-c) container main Error exit 1: boom \\x1b]0;pwned\\x07... \\u202eFAKE; the attempt's logs are "
               "kept in ConfigMap esc-attempt-0")
    print(f"\ncondition Restarting: {restarting['message']}")
    assert restarting["message"] == message
    assert await eventually(lambda: _events(cluster, "MPIJobRestarting"), what="the Event") == [message]
    shown = await asyncio.to_thread(kubectl_mpijob, control_plane.kubeconfig, "status", "esc", "-n", cluster.ns)
    print(f"$ kubectl mpijob status esc\n{shown.stdout}")
    assert shown.returncode == 0 and f"Last failure:     {message}\n" in shown.stdout, shown
    assert not any(c in shown.stdout for c in "\x1b\x07\u202e")
