"""The pi MPIJob on the locally built MPI image (imagePullPolicy Never): the e2e scenarios and `make run` use it."""

from __future__ import annotations

from typing import Any

from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIImplementation
from testkit.builders import make_mpijob

JSON = dict[str, Any]

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
    job = (make_mpijob(name).workers(workers).slots(slots).implementation(implementation)
           .container(LAUNCHER, name="launcher", image=image, imagePullPolicy="Never", command=launcher_command)
           .container(WORKER, name="worker", image=image, imagePullPolicy="Never",
                      command=["/usr/local/bin/mpi-sshd"])
           .spec(**spec))
    pod_security: JSON = {}
    if run_as_user is not None:
        pod_security["runAsUser"] = run_as_user
    if fs_group is not None:
        pod_security["fsGroup"] = fs_group
    if pod_security:
        job.pod_spec(LAUNCHER, securityContext=pod_security).pod_spec(WORKER, securityContext=pod_security)
    if launcher_env:
        job.container(LAUNCHER, env=launcher_env)
    if worker_readiness_probe:
        job.container(WORKER, readinessProbe={"tcpSocket": {"port": 2222}, "periodSeconds": 1, "failureThreshold": 30})
    if worker_pod_spec:
        job.pod_spec(WORKER, **worker_pod_spec)
    if ssh_auth_mount_path:
        job.ssh_auth_mount_path(ssh_auth_mount_path)
    return job.manifest()
