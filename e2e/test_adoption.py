"""Switching from kubeflow/mpi-operator to mpiop with a job running, on the real node.

kubeflow's objects for its `pi` example (the shapes v0.8.2 created, testkit/fixtures) are created while no
operator runs, with the local MPI image: the MPIJob, Secret, ConfigMap, Service, worker pods and the launcher
`Job`, whose pod the Job controller starts; mpirun runs. Then mpiop starts, takes the job over and sees it
to Succeeded, with no pod of it deleted or made while it ran.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import time

from mpiop import ssh
from mpiop.api.raw import JSON
from mpiop.kube.client import KubeClient
from testkit import kubeflow
from testkit.e2e.kube import is_true, wait_for
from testkit.e2e.mpi import assert_pi
from testkit.e2e.session import E2E, operator_process

SLEEP = "20"  # every rank sleeps this long before reducing: mpiop starts while mpirun runs
LAUNCHER_COMMAND = ["mpi-wait-hosts", "mpirun.openmpi"]
LAUNCHER_ARGS = ["-n", "2", "/home/mpiuser/pi", "2000000", SLEEP]


def on_this_node(items: list[JSON], image: str) -> list[JSON]:
    """kubeflow's objects with the local image, its pi program and sshd, no CPU limits, and a real key pair."""
    private, public = ssh.generate_key_pair(comment="kubeflow")
    shaped = []
    for obj in items:
        obj = kubeflow.with_image(copy.deepcopy(obj), image)
        kind = obj["kind"]
        if kind == "Secret":
            obj["data"] = {"ssh-privatekey": base64.b64encode(private).decode(),
                           "ssh-publickey": base64.b64encode(public).decode()}
        for role, template in _templates(obj):
            container = template["containers"][0]
            container.pop("resources", None)  # 1 CPU each: three pods would not fit this 2-core node
            if role == "Launcher":
                container["command"], container["args"] = list(LAUNCHER_COMMAND), list(LAUNCHER_ARGS)
            else:
                container["command"], container["args"] = ["/usr/local/bin/mpi-sshd"], []
        shaped.append(obj)
    return shaped


def _templates(obj: JSON) -> list[tuple[str, JSON]]:
    if obj["kind"] == "MPIJob":
        return [(role, spec["template"]["spec"]) for role, spec in obj["spec"]["mpiReplicaSpecs"].items()]
    if obj["kind"] == "Job":
        return [("Launcher", obj["spec"]["template"]["spec"])]
    if obj["kind"] == "Pod" and obj["metadata"]["labels"].get("training.kubeflow.org/job-role") == "worker":
        return [("Worker", obj["spec"])]
    return []


async def _recreate(e2e: E2E, items: list[JSON]) -> None:
    kube = await KubeClient.connect(str(e2e.node.kubeconfig))
    try:
        await kubeflow.recreate(kube, e2e.ns, "kf-pi-ok.0-created", items=items, pod_status=False)
    finally:
        await kube.close()


def test_a_running_kubeflow_job_is_taken_over_and_succeeds(bare: E2E) -> None:
    e2e = bare
    items = on_this_node(kubeflow.load("kf-pi-ok.0-created"), e2e.image)
    created = time.monotonic()
    asyncio.run(_recreate(e2e, items))

    def launcher_pod() -> JSON | None:
        pods = e2e.api.pods(e2e.ns, "batch.kubernetes.io/job-name=pi-launcher")
        return pods[0] if pods else None

    def log() -> str:
        pod = launcher_pod()
        try:
            return e2e.api.logs(e2e.ns, pod["metadata"]["name"]) if pod else ""
        except Exception:  # not started yet
            return ""

    wait_for(lambda: "every rank sleeps" in log(), 180, "kubeflow's mpirun to be running (no operator yet)",
             describe=lambda: e2e.describe("pi"))
    pod = launcher_pod()
    assert pod is not None
    launcher = pod["metadata"]["name"]
    workers = {p["metadata"]["name"]: p["metadata"]["uid"] for p in e2e.api.pods(e2e.ns) if "-worker-" in
               p["metadata"]["name"]}
    assert sorted(workers) == ["pi-worker-0", "pi-worker-1"]

    with operator_process(e2e):
        adopted = time.monotonic()
        seen: set[tuple[str, str]] = set()
        while True:
            pods = e2e.api.pods(e2e.ns)
            seen |= {(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods}
            job = e2e.job("pi")
            if is_true(job, "Succeeded") or is_true(job, "Failed"):
                break
            assert time.monotonic() - adopted < 180, f"not finished 180 s after mpiop started\n{e2e.describe('pi')}"
            time.sleep(0.5)  # poll interval: every pod the job ever had is seen (each lives seconds at least)
        e2e.record("kubeflow-job-adopted (from mpiop's start)", time.monotonic() - adopted)
        e2e.record("kubeflow-job-adopted (from creation)", time.monotonic() - created)
        assert e2e.node.workdir is not None
        operator_log = (e2e.node.workdir / "logs" / f"operator-{e2e.ns}.log").read_text()

    assert job is not None and is_true(job, "Succeeded"), e2e.describe("pi")
    assert [c["type"] for c in job["status"]["conditions"]] == ["Created", "Running", "Succeeded"]
    # While it ran nothing was made or replaced: kubeflow's launcher pod and the same two workers throughout.
    assert {name for name, _ in seen} == {launcher, *workers}, seen
    assert {(n, u) for n, u in seen if n in workers} == set(workers.items())
    assert "claimed an object kubeflow's operator made" in operator_log
    pi_log = e2e.api.logs(e2e.ns, launcher)
    print(f"\nkubeflow's launcher {launcher}, finished under mpiop:\n{pi_log}")
    assert_pi(pi_log, "pi", ranks=2, hosts=2)
