"""mpiop.desired.ssh_config: the SSH client config written for the launcher, and the port table read back from it."""

from __future__ import annotations

from mpiop.desired import hostnetwork as hn
from mpiop.desired import ssh_config
from mpiop.desired.objects import config_map
from mpiop.policies import host_ports
from testkit.mpijobs import MPIJobBuilder, make_mpijob


def table(builder: MPIJobBuilder, attempt: int = 0) -> hn.Ports:
    return host_ports.table(builder.obj(), attempt, [], None)


def test_ssh_config_text() -> None:
    job = make_mpijob("pi", "ns").host_network().obj()
    ports = hn.Ports(3, {"pi-worker-0": 20001, "pi-worker-1": 20002, hn.MASTER: 20003})
    assert ssh_config.render(job, ports) == (
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
    assert ssh_config.host_patterns(job, "pi-worker-0", "example.org") == [
        "pi-worker-0", "pi-worker-0.pi.ns.svc.example.org", "pi-worker-0.pi.ns.svc",
        "pi-worker-0.pi.ns.svc.cluster.local"]


def test_config_map_has_ssh_config_only_on_the_host_network() -> None:
    assert ssh_config.NAME not in config_map(make_mpijob("pi").obj(), [])["data"]
    job = make_mpijob("pi").host_network()
    data = config_map(job.obj(), [], ports=table(job))["data"]
    assert data[ssh_config.NAME] == ssh_config.render(job.obj(), table(job))
    assert ssh_config.is_current(job.obj(), table(job), {"data": data})
    assert not ssh_config.is_current(job.obj(), table(job), None)
    assert not ssh_config.is_current(job.obj(), table(job, attempt=1), {"data": data})


def test_the_table_is_read_back_for_its_attempt_only() -> None:
    job = make_mpijob("pi").host_network()
    recorded = config_map(job.obj(), [], ports=table(job, attempt=2))
    assert ssh_config.read(recorded, 2) == dict(table(job, attempt=2).by_key)
    assert ssh_config.read(recorded, 1) == {}
    assert ssh_config.read(None, 0) == {}
