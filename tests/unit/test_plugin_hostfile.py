"""kubectl mpijob: rank -> pod through the hostfile mpiop writes, in each MPI implementation's format."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import MPIImplementation, MPIJob
from mpiop.desired.hostfile import hostfile
from mpiop.plugin.hostfile import Host, RankError, hosts, pod_of_rank
from testkit.mpijobs import make_mpijob


def job(implementation: MPIImplementation = "OpenMPI", workers: int = 2, slots: int = 2,
        launcher_works: bool = False) -> MPIJob:
    return (make_mpijob("pi", "ns").workers(workers).slots(slots).implementation(implementation)
            .launcher_as_worker(launcher_works).obj())


@pytest.mark.parametrize("implementation", ["OpenMPI", "Intel", "MPICH"])
@pytest.mark.parametrize(
    ("rank", "pod"),
    [(0, "pi-worker-0"), (1, "pi-worker-0"), (2, "pi-worker-1"), (3, "pi-worker-1")],
)
def test_rank_to_pod_through_the_slots(implementation: MPIImplementation, rank: int, pod: str) -> None:
    written = hostfile(job(implementation))
    assert pod_of_rank(hosts(written, "pi-launcher", "pi-launcher"), rank).pod == pod


@pytest.mark.parametrize(
    ("attempt_launcher", "rank", "pod"),
    [("pi-launcher", 0, "pi-launcher"), ("pi-launcher-2", 1, "pi-launcher-2"), ("pi-launcher-2", 3, "pi-worker-0"),
     ("pi-launcher-2", 6, "pi-worker-2")],
)
def test_a_working_launcher_is_its_attempts_pod(attempt_launcher: str, rank: int, pod: str) -> None:
    """Open MPI lists the launcher by its hostname, `<job>-launcher`: rank 0 is on whichever pod runs it now."""
    written = hostfile(job(workers=3, slots=2, launcher_works=True))
    assert written.startswith("pi-launcher slots=2\n")
    assert pod_of_rank(hosts(written, "pi-launcher", attempt_launcher), rank).pod == pod


def test_hosts_carry_their_ranks() -> None:
    found = hosts("a.svc slots=1\nb.svc slots=3\n# a comment\n\nc\n", "x-launcher", "x-launcher")
    assert found == [Host("a", 0, 1), Host("b", 1, 3), Host("c", 4, 1)]
    assert [h.ranks for h in found] == ["0", "1-3", "4"]


@pytest.mark.parametrize(("text", "rank", "message"), [
    ("pi-worker-0.pi.ns.svc slots=2\n", 2, "rank 2 is not in the hostfile (ranks 0-1)"),
    ("", 0, "rank 0 is not in the hostfile (no ranks)"),
])
def test_a_rank_out_of_the_hostfile_is_named(text: str, rank: int, message: str) -> None:
    with pytest.raises(RankError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pod_of_rank(hosts(text, "pi-launcher", "pi-launcher"), rank)
