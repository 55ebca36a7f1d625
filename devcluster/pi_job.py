"""The pi MPIJob on the locally built MPI image (imagePullPolicy Never): the e2e scenarios and `make run` use it.

Written out as plain JSON: devcluster runs clusters and sits below testkit, so it does not use testkit's builders.
"""

from __future__ import annotations

import copy
from typing import Any

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIImplementation

# Sample count per rank: enough work to be a real computation, little enough to take a second.
SAMPLES = "2000000"


def pi_job(name: str, image: str, *, implementation: MPIImplementation = "OpenMPI", workers: int = 2, slots: int = 2,
           launcher_command: list[str] | None = None, run_as_user: int | None = None,
           ssh_auth_mount_path: str | None = None, fs_group: int | None = None,
           worker_readiness_probe: bool = False, launcher_env: list[JSON] | None = None,
           worker_pod_spec: JSON | None = None, **spec: Any) -> JSON:
    """A pi MPIJob: `workers` workers running mpi-sshd, a launcher running `launcher_command`.

    By default the launcher waits for its hosts (mpi-wait-hosts) and runs the pi program of the chosen MPI
    with one rank per slot. `spec` goes into the MPIJob spec as is (runPolicy, launcherCreationPolicy, ...).
    """
    ranks = str(workers * slots)
    if launcher_command is None:
        if implementation == "MPICH":
            launcher_command = ["mpi-wait-hosts", "mpirun.mpich", "-n", ranks, "/usr/local/bin/pi-mpich", SAMPLES]
        else:
            launcher_command = ["mpi-wait-hosts", "mpirun.openmpi", "-n", ranks,
                                "/usr/local/bin/pi-openmpi", SAMPLES]
            if run_as_user in (None, 0):
                launcher_command.insert(2, "--allow-run-as-root")
    launcher: JSON = {"name": "launcher", "image": image, "imagePullPolicy": "Never", "command": launcher_command}
    if launcher_env:
        launcher["env"] = launcher_env
    worker: JSON = {"name": "worker", "image": image, "imagePullPolicy": "Never",
                    "command": ["/usr/local/bin/mpi-sshd"]}
    if worker_readiness_probe:
        worker["readinessProbe"] = {"tcpSocket": {"port": 2222}, "periodSeconds": 1, "failureThreshold": 30}
    security: JSON = {key: value for key, value in (("runAsUser", run_as_user), ("fsGroup", fs_group))
                      if value is not None}

    def template(container: JSON, **pod_spec: Any) -> JSON:
        context = {"securityContext": dict(security)} if security else {}
        return {"spec": {"containers": [container], **context, **pod_spec}}

    job_spec: JSON = {
        "slotsPerWorker": slots, "mpiImplementation": implementation, "runPolicy": {},
        "mpiReplicaSpecs": {LAUNCHER: {"replicas": 1, "template": template(launcher)},
                            WORKER: {"replicas": workers, "template": template(worker, **(worker_pod_spec or {}))}},
        **spec,
    }
    if ssh_auth_mount_path:
        job_spec["sshAuthMountPath"] = ssh_auth_mount_path
    # A copy: nothing of the caller's arguments is shared with it.
    return copy.deepcopy({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
                          "spec": job_spec})
