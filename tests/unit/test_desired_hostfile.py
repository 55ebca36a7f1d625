"""mpiop.desired.hostfile: the hostfile per MPI implementation, and discover_hosts.sh."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import MPIImplementation
from mpiop.desired.hostfile import discover_hosts, host_line, hostfile
from testkit.mpijobs import MPIJobBuilder, make_mpijob


@pytest.mark.parametrize(
    ("implementation", "expected"),
    [("OpenMPI", "h slots=4"), ("Intel", "h:4"), ("MPICH", "h:4")],
    ids=["openmpi", "intel", "mpich"],
)
def test_host_line(implementation: MPIImplementation, expected: str) -> None:
    assert host_line(implementation, "h", 4) == expected


W = "pi-worker-{}.pi.ns.svc"
L = "pi-launcher.pi.ns.svc"


@pytest.mark.parametrize(
    ("job", "cluster_domain", "expected"),
    [
        (make_mpijob("pi", "ns").workers(2), "", f"{W.format(0)} slots=1\n{W.format(1)} slots=1\n"),
        (make_mpijob("pi", "ns").workers(2).slots(4).implementation("OpenMPI"), "",
         f"{W.format(0)} slots=4\n{W.format(1)} slots=4\n"),
        (make_mpijob("pi", "ns").workers(2).gpus(8).implementation("Intel"), "",
         f"{W.format(0)}:8\n{W.format(1)}:8\n"),
        (make_mpijob("pi", "ns").workers(1).slots(2).implementation("MPICH"), "", f"{W.format(0)}:2\n"),
        (make_mpijob("pi", "ns").workers(2).launcher_as_worker(), "",
         f"pi-launcher slots=1\n{W.format(0)} slots=1\n{W.format(1)} slots=1\n"),
        (make_mpijob("pi", "ns").workers(1).launcher_as_worker().implementation("Intel").slots(3), "",
         f"{L}:3\n{W.format(0)}:3\n"),
        (make_mpijob("pi", "ns").workers(1), "cluster.local", f"{W.format(0)}.cluster.local slots=1\n"),
        (make_mpijob("pi", "ns").workers(0).launcher_as_worker(), "", "pi-launcher slots=1\n"),
        (make_mpijob("pi", "ns").workers(0), "", ""),
        (make_mpijob("pi", "ns").workers(12), "", "".join(f"{W.format(i)} slots=1\n" for i in range(12))),
    ],
    ids=["openmpi-default", "openmpi-slots", "intel-gpus", "mpich", "launcher-as-worker-first",
         "launcher-as-worker-intel", "cluster-domain", "launcher-only-worker", "no-hosts", "numeric-order"],
)
def test_hostfile(job: MPIJobBuilder, cluster_domain: str, expected: str) -> None:
    assert hostfile(job.obj(), cluster_domain) == expected


@pytest.mark.parametrize(
    ("job", "running", "cluster_domain", "expected"),
    [
        (make_mpijob("pi", "ns").workers(3), [], "", ["#!/bin/sh"]),
        (make_mpijob("pi", "ns").workers(3).slots(2), [2, 0], "",
         ["#!/bin/sh", f"echo {W.format(0)}:2", f"echo {W.format(2)}:2"]),
        (make_mpijob("pi", "ns").workers(3).launcher_as_worker(), [1], "",
         ["#!/bin/sh", f"echo {L}:1", f"echo {W.format(1)}:1"]),
        (make_mpijob("pi", "ns").workers(1).implementation("OpenMPI"), [0], "cluster.local",
         ["#!/bin/sh", f"echo {W.format(0)}.cluster.local:1"]),
        (make_mpijob("pi", "ns").workers(11), [10, 9], "",
         ["#!/bin/sh", f"echo {W.format(9)}:1", f"echo {W.format(10)}:1"]),
    ],
    ids=["none-running", "sorted-with-slots", "launcher-always-listed", "cluster-domain", "numeric-sort"],
)
def test_discover_hosts(job: MPIJobBuilder, running: list[int], cluster_domain: str, expected: list[str]) -> None:
    assert discover_hosts(job.obj(), running, cluster_domain) == "\n".join(expected) + "\n"
