"""mpiop.policies.host_ports: each host-network pod's port, deterministic per (job, attempt), kept while held, and
moved along its own sequence after a conflict."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.desired import hostnetwork as hn
from mpiop.desired import ssh_config
from mpiop.desired.objects import config_map
from mpiop.policies import host_ports
from testkit.mpijobs import MPIJobBuilder, make_mpijob
from testkit.pods import make_pod


def table(builder: MPIJobBuilder, attempt: int = 0, pods: list[JSON] | None = None,
          config: JSON | None = None, port_range: hn.PortRange = hn.DEFAULT_PORT_RANGE) -> hn.Ports:
    return host_ports.table(builder.obj(), attempt, pods or [], config, port_range)


def held(builder: MPIJobBuilder, index: int, ports: hn.Ports, attempt: int = 0) -> Any:
    """A worker pod as desired.pods made it from `ports`: its ports on its labels."""
    job = builder.obj()
    pod = make_pod(job, "worker", index, attempt)
    name = f"{job.metadata.name}-worker-{index}"
    pod.label(names.SSH_PORT_LABEL, str(ports.ssh(name)))
    if index == 0 and ports.master is not None:
        pod.label(names.MASTER_PORT_LABEL, str(ports.master))
    return pod


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
    assert ssh_config.read(recorded, 1) == {}
    assert ssh_config.read(recorded, 0) == dict(table(job, attempt=0).by_key)
