"""Environment the launcher (and workers) get, per MPI implementation.

Each implementation is told where the hostfile is and to retry SSH connections while worker DNS
records appear. Open MPI 4 reads OMPI_MCA_orte_*; Open MPI 5 moved the launcher into PRRTE, which
reads PRTE_MCA_*; setting both lets one job spec work with either image.
"""

from __future__ import annotations

from mpiop import names
from mpiop.api.v2beta1 import MPIImplementation, MPIJob
from mpiop.desired.slots import slots_per_worker

EnvVar = dict[str, str]

SSH_RETRY_ARGS = "-o ConnectionAttempts=10"
HOSTFILE_PATH = f"{names.CONFIG_MOUNT_PATH}/{names.HOSTFILE_NAME}"


def implementation_env(implementation: MPIImplementation, slots: int) -> list[EnvVar]:
    if implementation == "OpenMPI":
        return [
            # Open MPI 4 (ORTE)
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": HOSTFILE_PATH},
            {"name": "OMPI_MCA_plm_rsh_args", "value": SSH_RETRY_ARGS},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
            # Open MPI 5 (PRRTE)
            {"name": "PRTE_MCA_prte_keep_fqdn_hostnames", "value": "true"},
            {"name": "PRTE_MCA_prte_default_hostfile", "value": HOSTFILE_PATH},
            {"name": "PRTE_MCA_plm_ssh_args", "value": SSH_RETRY_ARGS},
        ]
    if implementation == "Intel":
        return [
            {"name": "I_MPI_HYDRA_HOST_FILE", "value": HOSTFILE_PATH},
            {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": SSH_RETRY_ARGS},
            {"name": "I_MPI_PERHOST", "value": str(slots)},
        ]
    return [
        {"name": "HYDRA_HOST_FILE", "value": HOSTFILE_PATH},
        {"name": "HYDRA_LAUNCH_EXTRA_ARGS", "value": SSH_RETRY_ARGS},
    ]


def launcher_env(job: MPIJob) -> list[EnvVar]:
    env = [{"name": "K_MPI_JOB_ROLE", "value": names.LAUNCHER_ROLE}]
    env += implementation_env(job.spec.effective_mpi_implementation, slots_per_worker(job))
    if not job.spec.run_launcher_as_worker:
        # A launcher that runs no ranks must not grab the node's GPUs through the NVIDIA runtime.
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
    return env


def worker_env() -> list[EnvVar]:
    return [{"name": "K_MPI_JOB_ROLE", "value": names.WORKER_ROLE}]


def merge_env(existing: list[dict[str, object]] | None, added: list[EnvVar]) -> list[dict[str, object]]:
    """The user's own variables win: ours are added only where the template has no variable of that name."""
    existing = list(existing or [])
    present = {e.get("name") for e in existing}
    return existing + [dict(e) for e in added if e["name"] not in present]
