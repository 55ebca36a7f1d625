"""mpiop.desired.hostnetwork: the port range, who gets a host port, and the launcher's settings on the host
network (desired.env). Which port each gets: test_policy_host_ports.py; the SSH config: test_desired_ssh_config.py."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import MPIImplementation
from mpiop.desired import hostnetwork as hn
from mpiop.desired.env import SSH_RETRY_ARGS, launcher_env
from mpiop.policies import host_ports
from testkit.mpijobs import MPIJobBuilder, make_mpijob

# -- the range -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("20000-30000", hn.PortRange(20000, 30000)),
    (" 1024 - 1024 ", hn.PortRange(1024, 1024)),
])
def test_port_range_parse(text: str, expected: hn.PortRange) -> None:
    assert hn.PortRange.parse(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("20000", "expected FIRST-LAST"),
    ("a-b", "expected FIRST-LAST"),
    ("30000-20000", "need 1 <= first <= last <= 65535"),
    ("0-10", "need 1 <= first <= last <= 65535"),
    ("60000-70000", "need 1 <= first <= last <= 65535"),
])
def test_port_range_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hn.PortRange.parse(text)


# -- who gets a port -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("builder", "ssh", "master"), [
    (make_mpijob("pi"), [], None),
    (make_mpijob("pi").host_network("Launcher"), [], None),
    (make_mpijob("pi").host_network("Worker"), ["pi-worker-0", "pi-worker-1"], "pi-worker-0"),
    (make_mpijob("pi").host_network(), ["pi-worker-0", "pi-worker-1"], "pi-worker-0"),
    (make_mpijob("pi").host_network().launcher_as_worker(), ["pi-launcher", "pi-worker-0", "pi-worker-1"],
     "pi-launcher"),
    (make_mpijob("pi").host_network("Worker").launcher_as_worker(), ["pi-worker-0", "pi-worker-1"], None),
], ids=["pod-network", "launcher-only", "workers-only", "both", "launcher-as-worker", "launcher-as-worker-pod-net"])
def test_who_gets_a_port(builder: MPIJobBuilder, ssh: list[str], master: str | None) -> None:
    job = builder.obj()
    assert hn.ssh_pods(job) == ssh
    assert hn.master_pod(job) == master
    ports = host_ports.table(job, 0, [], None)
    assert [k for k in ports.by_key if k != hn.MASTER] == ssh
    assert (hn.master_port(job, ports) is not None) == (master is not None)
    assert bool(ports) == bool(ssh or master)


# -- the launcher's environment per implementation -----------------------------------------------------------

F = f"{SSH_RETRY_ARGS} -F /etc/mpi/ssh_config"


@pytest.mark.parametrize(("implementation", "replicas", "as_worker", "expected"), [
    ("OpenMPI", ("Worker",), False, {"OMPI_MCA_plm_rsh_args": F, "PRTE_MCA_plm_ssh_args": F,
                                     "OMPI_MCA_plm_rsh_no_tree_spawn": "1", "PRTE_MCA_plm_ssh_no_tree_spawn": "1"}),
    ("OpenMPI", ("Launcher", "Worker"), False, {"OMPI_MCA_plm_rsh_args": F, "OMPI_MCA_if_base_do_not_resolve": "1"}),
    ("OpenMPI", ("Launcher", "Worker"), True, {"OMPI_MCA_plm_rsh_args": F, "OMPI_MCA_if_base_do_not_resolve": None}),
    ("Intel", ("Launcher", "Worker"), False, {"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": F,
                                              "I_MPI_HYDRA_BOOTSTRAP_AUTOFORK": "0"}),
    ("Intel", ("Worker",), False, {"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": F, "I_MPI_HYDRA_BOOTSTRAP_AUTOFORK": None}),
    ("MPICH", ("Launcher", "Worker"), False, {"HYDRA_LAUNCHER_EXTRA_ARGS": F, "HYDRA_LAUNCH_EXTRA_ARGS": F,
                                              "HYDRA_LAUNCHER_AUTOFORK": "0"}),
    ("MPICH", ("Launcher", "Worker"), True, {"HYDRA_LAUNCHER_EXTRA_ARGS": F, "HYDRA_LAUNCHER_AUTOFORK": None}),
    ("OpenMPI", ("Launcher",), False, {"OMPI_MCA_plm_rsh_args": SSH_RETRY_ARGS,
                                       "OMPI_MCA_if_base_do_not_resolve": None,
                                       "OMPI_MCA_plm_rsh_no_tree_spawn": None}),
], ids=["openmpi-workers", "openmpi-all", "openmpi-launcher-as-worker", "intel-all", "intel-workers",
        "mpich-all", "mpich-launcher-as-worker", "launcher-only"])
def test_launcher_env_on_the_host_network(implementation: MPIImplementation, replicas: tuple[Any, ...],
                                          as_worker: bool, expected: dict[str, str | None]) -> None:
    job = make_mpijob("pi").implementation(implementation).host_network(*replicas).launcher_as_worker(as_worker)
    env = {e["name"]: e["value"] for e in launcher_env(job.obj())}
    for name, value in expected.items():
        assert env.get(name) == value, name
