"""mpiop.desired.env: the launcher's MPI environment per implementation; user variables win."""

from __future__ import annotations

import pytest

from mpiop.desired.env import HOSTFILE_PATH, SSH_RETRY_ARGS, launcher_env, merge_env, worker_env
from testkit.mpijobs import MPIJobBuilder, make_mpijob


def as_dict(env: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env}


def test_hostfile_path() -> None:
    assert HOSTFILE_PATH == "/etc/mpi/hostfile"


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (make_mpijob("j").slots(4), {
            "K_MPI_JOB_ROLE": "launcher",
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
            "OMPI_MCA_plm_rsh_args": SSH_RETRY_ARGS,
            "OMPI_MCA_orte_set_default_slots": "4",
            "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
            "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
            "PRTE_MCA_plm_ssh_args": SSH_RETRY_ARGS,
            "PRTE_MCA_prte_set_default_slots": "4",
            "NVIDIA_VISIBLE_DEVICES": "",
            "NVIDIA_DRIVER_CAPABILITIES": "",
        }),
        (make_mpijob("j").implementation("Intel").gpus(2), {
            "K_MPI_JOB_ROLE": "launcher",
            "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": SSH_RETRY_ARGS,
            "I_MPI_PERHOST": "2",
            "NVIDIA_VISIBLE_DEVICES": "",
            "NVIDIA_DRIVER_CAPABILITIES": "",
        }),
        (make_mpijob("j").implementation("MPICH"), {
            "K_MPI_JOB_ROLE": "launcher",
            "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
            "HYDRA_LAUNCH_EXTRA_ARGS": SSH_RETRY_ARGS,
            "HYDRA_LAUNCHER_EXTRA_ARGS": SSH_RETRY_ARGS,
            "NVIDIA_VISIBLE_DEVICES": "",
            "NVIDIA_DRIVER_CAPABILITIES": "",
        }),
        (make_mpijob("j").implementation("MPICH").launcher_as_worker(), {
            "K_MPI_JOB_ROLE": "launcher",
            "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
            "HYDRA_LAUNCH_EXTRA_ARGS": SSH_RETRY_ARGS,
            "HYDRA_LAUNCHER_EXTRA_ARGS": SSH_RETRY_ARGS,
        }),
    ],
    ids=["openmpi", "intel", "mpich", "launcher-as-worker-keeps-gpus"],
)
def test_launcher_env(job: MPIJobBuilder, expected: dict[str, str]) -> None:
    env = launcher_env(job.obj())
    assert as_dict(env) == expected
    assert len(env) == len(expected), "no variable twice"
    assert env[0] == {"name": "K_MPI_JOB_ROLE", "value": "launcher"}


@pytest.mark.parametrize(
    ("run_launcher_as_worker", "blanked"),
    [(None, True), (False, True), (True, False)],
    ids=["unset", "false", "true"],
)
def test_nvidia_blanking(run_launcher_as_worker: bool | None, blanked: bool) -> None:
    builder = make_mpijob("j").gpus(1)
    if run_launcher_as_worker is not None:
        builder.launcher_as_worker(run_launcher_as_worker)
    env = as_dict(launcher_env(builder.obj()))
    assert ("NVIDIA_VISIBLE_DEVICES" in env) is blanked
    assert ("NVIDIA_DRIVER_CAPABILITIES" in env) is blanked
    if blanked:
        assert env["NVIDIA_VISIBLE_DEVICES"] == ""


def test_worker_env() -> None:
    assert worker_env() == [{"name": "K_MPI_JOB_ROLE", "value": "worker"}]


@pytest.mark.parametrize(
    ("existing", "added", "expected"),
    [
        (None, [{"name": "A", "value": "1"}], [{"name": "A", "value": "1"}]),
        ([{"name": "A", "value": "mine"}], [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         [{"name": "A", "value": "mine"}, {"name": "B", "value": "2"}]),
        ([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}], [{"name": "A", "value": "1"}],
         [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        ([{"name": "Z", "value": "z"}], [], [{"name": "Z", "value": "z"}]),
    ],
    ids=["no-existing", "user-wins-order-kept", "user-valueFrom-wins", "nothing-added"],
)
def test_merge_env(existing: list[dict[str, object]] | None, added: list[dict[str, str]],
                   expected: list[dict[str, object]]) -> None:
    assert merge_env(existing, added) == expected


def test_merge_env_does_not_mutate_inputs() -> None:
    existing: list[dict[str, object]] = [{"name": "A", "value": "1"}]
    added = [{"name": "B", "value": "2"}]
    merged = merge_env(existing, added)
    merged[1]["value"] = "changed"
    assert existing == [{"name": "A", "value": "1"}]
    assert added == [{"name": "B", "value": "2"}]
