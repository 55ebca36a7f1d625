"""mpiop.desired.hostnetwork: per-pod host ports, the SSH client config naming them, and the launcher's settings."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.v2beta1 import MPIImplementation
from mpiop.desired import hostnetwork as hn
from mpiop.desired.env import SSH_RETRY_ARGS, launcher_env
from mpiop.desired.objects import config_map
from testkit.builders import MPIJobBuilder, make_mpijob, make_pod

JSON = dict[str, Any]


def table(builder: MPIJobBuilder, attempt: int = 0, pods: list[JSON] | None = None,
          config: JSON | None = None, port_range: hn.PortRange = hn.DEFAULT_PORT_RANGE) -> hn.Ports:
    return hn.ports(builder.obj(), attempt, pods or [], config, port_range)


def held(builder: MPIJobBuilder, index: int, ports: hn.Ports, attempt: int = 0) -> Any:
    """A worker pod as desired.pods made it from `ports`: its ports on its labels."""
    job = builder.obj()
    pod = make_pod(job, "worker", index, attempt)
    name = f"{job.metadata.name}-worker-{index}"
    pod.label(hn.SSH_PORT_LABEL, str(ports.ssh(name)))
    if index == 0 and ports.master is not None:
        pod.label(hn.MASTER_PORT_LABEL, str(ports.master))
    return pod


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
    ports = table(builder)
    assert [k for k in ports.by_key if k != hn.MASTER] == ssh
    assert (hn.master_port(job, ports) is not None) == (master is not None)
    assert bool(ports) == bool(ssh or master)


# -- allocation ------------------------------------------------------------------------------------------------

def test_allocation_is_deterministic_per_job_and_attempt() -> None:
    job = make_mpijob("pi").host_network().workers(8)
    first = table(job)
    assert table(job) == first, "a restarted operator picks the same ports"
    assert table(job, attempt=1) != first, "a new attempt gets new ports"
    assert table(make_mpijob("pi").host_network().workers(8).uid("another")) != first, "another job, other ports"


@pytest.mark.parametrize(("workers", "port_range"), [
    (2, hn.DEFAULT_PORT_RANGE),
    (1000, hn.DEFAULT_PORT_RANGE),
    (300, hn.PortRange(20000, 20300)),  # 300 ssh ports + MASTER: every port of the range
], ids=["small", "1000-workers", "range-exactly-full"])
def test_allocation_within_range_without_duplicates(workers: int, port_range: hn.PortRange) -> None:
    ports = table(make_mpijob("big").host_network().workers(workers), port_range=port_range)
    values = list(ports.by_key.values())
    assert len(values) == workers + 1
    assert len(set(values)) == len(values), "no port twice in one job"
    assert all(p in port_range for p in values)


def test_range_too_small_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"port range 20000-20009 has no free port left"):
        table(make_mpijob("big").host_network().workers(10), port_range=hn.PortRange(20000, 20009))


def test_ports_pods_hold_are_kept_even_from_another_range() -> None:
    job = make_mpijob("pi").host_network()
    old = table(job, port_range=hn.PortRange(40000, 40100))
    pods = [held(job, i, old).running().obj() for i in range(2)]
    assert table(job, pods=pods) == old


def test_a_port_conflict_moves_the_pod_along_its_own_sequence() -> None:
    job = make_mpijob("pi").host_network()
    first = table(job)
    stuck = [held(job, 0, first).running().obj(), held(job, 1, first).unschedulable().obj()]
    second = table(job, pods=stuck)
    assert second.ssh("pi-worker-0") == first.ssh("pi-worker-0"), "the running worker keeps its port"
    assert second.master == first.master
    assert second.ssh("pi-worker-1") not in (first.ssh("pi-worker-1"), first.ssh("pi-worker-0"), first.master)
    assert table(job, pods=stuck) == second, "deterministic"
    # The pod is deleted; the ConfigMap remembers its new port, which the new pod is made with.
    recorded = config_map(job.obj(), [], ports=second)
    assert table(job, pods=stuck[:1], config=recorded) == second
    # It conflicts again: yet another port, never an earlier one.
    again = table(job, pods=[stuck[0], held(job, 1, second).unschedulable().obj()], config=recorded)
    assert again.ssh("pi-worker-1") not in (first.ssh("pi-worker-1"), second.ssh("pi-worker-1"))


def test_another_unschedulable_reason_keeps_the_port() -> None:
    job = make_mpijob("pi").host_network()
    first = table(job)
    pods = [held(job, 1, first).unschedulable("0/3 nodes are available: 3 Insufficient cpu.").obj()]
    assert table(job, pods=pods) == first


def test_recorded_ports_of_another_attempt_are_ignored() -> None:
    job = make_mpijob("pi").host_network()
    recorded = config_map(job.obj(), [], ports=table(job, attempt=0))
    assert table(job, attempt=1, config=recorded) == table(job, attempt=1)
    assert hn.read_config(recorded, 1) == {}
    assert hn.read_config(recorded, 0) == dict(table(job, attempt=0).by_key)


# -- the SSH client config -------------------------------------------------------------------------------------

def test_ssh_config_text() -> None:
    job = make_mpijob("pi", "ns").host_network().obj()
    ports = hn.Ports(3, {"pi-worker-0": 20001, "pi-worker-1": 20002, hn.MASTER: 20003})
    assert hn.ssh_config(job, ports) == (
        "# mpiop host network ports, attempt 3\n"
        "# (written by mpiop from the job's pods; MPIOP_SSH_PORT in each pod is its sshd port)\n"
        "# port pi-worker-0 20001\n"
        "# port pi-worker-1 20002\n"
        "# port master 20003\n"
        "Host pi-worker-0 pi-worker-0.pi.ns.svc pi-worker-0.pi.ns.svc.cluster.local\n"
        "    Port 20001\n"
        "Host pi-worker-1 pi-worker-1.pi.ns.svc pi-worker-1.pi.ns.svc.cluster.local\n"
        "    Port 20002\n"
        "Match all\n"
        "Include /etc/ssh/ssh_config\n"
    )


def test_ssh_config_with_a_cluster_domain_names_the_hostfile_host() -> None:
    job = make_mpijob("pi", "ns").host_network().obj()
    assert hn.host_patterns(job, "pi-worker-0", "example.org") == [
        "pi-worker-0", "pi-worker-0.pi.ns.svc.example.org", "pi-worker-0.pi.ns.svc",
        "pi-worker-0.pi.ns.svc.cluster.local"]


def test_config_map_has_ssh_config_only_on_the_host_network() -> None:
    assert hn.SSH_CONFIG_NAME not in config_map(make_mpijob("pi").obj(), [])["data"]
    job = make_mpijob("pi").host_network()
    data = config_map(job.obj(), [], ports=table(job))["data"]
    assert data[hn.SSH_CONFIG_NAME] == hn.ssh_config(job.obj(), table(job))
    assert hn.config_current(job.obj(), table(job), {"data": data})
    assert not hn.config_current(job.obj(), table(job), None)
    assert not hn.config_current(job.obj(), table(job, attempt=1), {"data": data})


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
