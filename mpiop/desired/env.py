"""Environment the launcher (and workers) get, per MPI implementation.

Each implementation is told where the hostfile is and to retry SSH connections while worker DNS
records appear. Open MPI 4 reads OMPI_MCA_orte_*; Open MPI 5 moved the launcher into PRRTE, which
reads PRTE_MCA_*; setting both lets one job spec work with either image. MPICH's Hydra reads
HYDRA_LAUNCHER_EXTRA_ARGS (kubeflow sets HYDRA_LAUNCH_EXTRA_ARGS, which only old Hydras read: both are set).
On the host network the ssh arguments also name the job's SSH client config (desired.ssh_config).
"""

from __future__ import annotations

import re
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIImplementation, MPIJob
from mpiop.desired import hostnetwork, presets, ssh_config
from mpiop.desired.slots import slots_per_worker

EnvVar = dict[str, str]

SSH_RETRY_ARGS = "-o ConnectionAttempts=10"
HOSTFILE_PATH = f"{names.CONFIG_MOUNT_PATH}/{names.HOSTFILE_NAME}"


def implementation_env(implementation: MPIImplementation, slots: int, ssh_args: str = SSH_RETRY_ARGS) -> list[EnvVar]:
    if implementation == "OpenMPI":
        return [
            # Open MPI 4 (ORTE)
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": HOSTFILE_PATH},
            {"name": "OMPI_MCA_plm_rsh_args", "value": ssh_args},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
            # Open MPI 5 (PRRTE)
            {"name": "PRTE_MCA_prte_keep_fqdn_hostnames", "value": "true"},
            {"name": "PRTE_MCA_prte_default_hostfile", "value": HOSTFILE_PATH},
            {"name": "PRTE_MCA_plm_ssh_args", "value": ssh_args},
            {"name": "PRTE_MCA_prte_set_default_slots", "value": str(slots)},
        ]
    if implementation == "Intel":
        return [
            {"name": "I_MPI_HYDRA_HOST_FILE", "value": HOSTFILE_PATH},
            {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": ssh_args},
            {"name": "I_MPI_PERHOST", "value": str(slots)},
        ]
    return [
        {"name": "HYDRA_HOST_FILE", "value": HOSTFILE_PATH},
        {"name": "HYDRA_LAUNCH_EXTRA_ARGS", "value": ssh_args},
        {"name": "HYDRA_LAUNCHER_EXTRA_ARGS", "value": ssh_args},
    ]


def launcher_env(job: MPIJob) -> list[EnvVar]:
    env = [{"name": "K_MPI_JOB_ROLE", "value": names.LAUNCHER_ROLE}]
    ssh_args = " ".join(filter(None, [SSH_RETRY_ARGS, _host_network_ssh_args(job)]))
    env += implementation_env(job.spec.effective_mpi_implementation, slots_per_worker(job), ssh_args)
    env += _host_network_env(job)
    if not job.spec.run_launcher_as_worker:
        # A launcher that runs no ranks must not grab the node's GPUs through the NVIDIA runtime.
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
    return env


def worker_env(ssh_port: int | None = None) -> list[EnvVar]:
    env = [{"name": "K_MPI_JOB_ROLE", "value": names.WORKER_ROLE}]
    if ssh_port is not None:
        env.append({"name": hostnetwork.SSH_PORT_ENV, "value": str(ssh_port)})
    return env


def merge_env(existing: list[dict[str, object]] | None, added: list[EnvVar]) -> list[dict[str, object]]:
    """The user's own variables win: ours are added only where the template has no variable of that name."""
    existing = list(existing or [])
    present = {e.get("name") for e in existing}
    return existing + [dict(e) for e in added if e["name"] not in present]


# -- framework presets and their forwarding to the ranks ---------------------------------------------------
# Ranks that mpirun starts over SSH get the environment of an SSH session, not the pod's: the launcher's
# MPI must carry the variables over. Hydra (Intel MPI, MPICH) passes the launcher's whole environment by
# default; Open MPI passes only OMPI_* and what it is told.
OPENMPI_ENV_LIST = "OMPI_MCA_mca_base_env_list"
_FORWARDABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?|\*")
# `-x NAME` on Open MPI 4's command line together with OMPI_MCA_mca_base_env_list is a fatal error
# ("orterun:conflict-env-set"): a command that forwards with -x keeps doing it alone.
_DASH_X = re.compile(r"(?:^|\s)-x(?:\s|$)")


def forward_env_entries(job: MPIJob) -> list[str]:
    """The annotation's entries: names or `PREFIX*`, separated by commas or spaces."""
    raw = job.metadata.annotations.get(names.FORWARD_ENV_ANNOTATION, "")
    return [e for e in re.split(r"[\s,]+", raw) if e]


def forward_env_errors(job: MPIJob) -> list[str]:
    """Entries that are not a variable name or `PREFIX*` (they would break mpirun's list)."""
    return [e for e in forward_env_entries(job) if not _FORWARDABLE.fullmatch(e)]


def _launcher_container(job: MPIJob) -> dict[str, Any]:
    containers = (job.spec.launcher.template.get("spec") or {}).get("containers") if job.spec.launcher else None
    return dict(containers[0]) if containers else {}


def forwarded_names(job: MPIJob, also: tuple[str, ...] = ()) -> list[str]:
    """The presets and `also`, then the user's entries; `PREFIX*` expands to the launcher container's `env` names.

    mpiop cannot see values from envFrom or the image, and Open MPI refuses a listed name the launcher does
    not have: a pattern only matches what the launcher's `env` declares; a plain name is taken as given."""
    declared = [str(e.get("name")) for e in _launcher_container(job).get("env") or [] if isinstance(e, dict)]
    result = [*presets.PRESET_NAMES, *also]
    for entry in forward_env_entries(job):
        if not _FORWARDABLE.fullmatch(entry):
            continue
        matched = [n for n in declared if n.startswith(entry[:-1])] if entry.endswith("*") else [entry]
        result += [n for n in matched if n not in result]
    return result


def _forwards_with_dash_x(job: MPIJob) -> bool:
    container = _launcher_container(job)
    words = [str(w) for key in ("command", "args") for w in container.get(key) or []]
    return any(_DASH_X.search(w) for w in words)


def forwarding_env(job: MPIJob, also: tuple[str, ...] = ()) -> list[EnvVar]:
    """How the launcher's MPI is told to pass the presets, `also` (and the user's list) on to every rank."""
    implementation = job.spec.effective_mpi_implementation
    if implementation == "Intel":
        return [{"name": "I_MPI_HYDRA_ENV", "value": "all"}]
    if implementation == "MPICH":
        return [{"name": "HYDRA_ENV", "value": "all"}]
    if _forwards_with_dash_x(job):
        return []
    # Open MPI 4 (orterun) and 5 (PRRTE's ompi personality) both read this list: `;`-separated names.
    return [{"name": OPENMPI_ENV_LIST, "value": ";".join(forwarded_names(job, also))}]


def framework_env(job: MPIJob, cluster_domain: str = "", master_port: int = presets.DEFAULT_MASTER_PORT,
                  also: tuple[str, ...] = ()) -> list[EnvVar]:
    """The launcher's presets and their forwarding (with `also`); workers get `presets.presets` alone."""
    return presets.presets(job, cluster_domain, master_port) + forwarding_env(job, also)


def _host_network_ssh_args(job: MPIJob) -> str:
    """Appended to the launcher's ssh arguments (plm_rsh_args, Hydra's bootstrap/launcher extra args)."""
    return f"-F {ssh_config.PATH}" if hostnetwork.ssh_pods(job) else ""


def _host_network_env(job: MPIJob) -> list[EnvVar]:
    """More launcher settings once ssh must find per-pod ports."""
    if not hostnetwork.ssh_pods(job):
        return []
    implementation = job.spec.effective_mpi_implementation
    env: list[EnvVar] = []
    if implementation == "OpenMPI":
        # Tree spawn would have the workers' daemons ssh on to other workers, which have no client config.
        env += [{"name": "OMPI_MCA_plm_rsh_no_tree_spawn", "value": "1"},
                {"name": "PRTE_MCA_plm_ssh_no_tree_spawn", "value": "1"}]
    launcher = job.spec.launcher
    if launcher is not None and hostnetwork.on_host_network(launcher.template) and not job.spec.run_launcher_as_worker:
        # A worker on the launcher's node resolves to one of the launcher's own addresses: Open MPI 4 files it under
        # its own node (the e2e job failed: "Please correct the hostfile"); a Hydra that compares addresses would
        # fork the worker's proxy in the launcher instead of ssh-ing to it.
        name = {"OpenMPI": "OMPI_MCA_if_base_do_not_resolve", "Intel": "I_MPI_HYDRA_BOOTSTRAP_AUTOFORK"}.get(
            implementation, "HYDRA_LAUNCHER_AUTOFORK")
        env.append({"name": name, "value": "1" if implementation == "OpenMPI" else "0"})
    return env


# -- exec launch: mpirun's remote agent is kubexec.sh, not ssh ----------------------------------------------
# The ssh arguments above mean nothing to the agent: dropped from an exec launcher's environment.
SSH_ARGS_VARIABLES = frozenset({"OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args",
                                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "HYDRA_LAUNCH_EXTRA_ARGS",
                                "HYDRA_LAUNCHER_EXTRA_ARGS"})


def exec_launch_env(implementation: MPIImplementation, agent: str) -> list[EnvVar]:
    """Point each MPI's launcher at `agent` and keep every remote start on the launcher: only it holds kubectl
    and a token (Open MPI would otherwise start daemons from daemons on big jobs). Intel MPI's hierarchical
    launch (I_MPI_HYDRA_BRANCH_COUNT, on big jobs) is left as it is: not tested here."""
    if implementation == "OpenMPI":
        return [
            {"name": "OMPI_MCA_plm_rsh_agent", "value": agent},  # Open MPI 4 (ORTE)
            {"name": "OMPI_MCA_plm_rsh_no_tree_spawn", "value": "1"},
            # Without tree spawn ORTE starts each orted with --daemonize, which does not outlive its exec
            # session (the job hung with every orted gone): they stay attached, as under SSH.
            {"name": "OMPI_MCA_orte_leave_session_attached", "value": "1"},
            {"name": "PRTE_MCA_plm_ssh_agent", "value": agent},  # Open MPI 5 (PRRTE)
            {"name": "PRTE_MCA_plm_ssh_no_tree_spawn", "value": "1"},
        ]
    if implementation == "Intel":
        return [
            {"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "rsh"},
            {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": agent},
        ]
    return [{"name": "HYDRA_LAUNCHER", "value": "rsh"}, {"name": "HYDRA_LAUNCHER_EXEC", "value": agent}]
