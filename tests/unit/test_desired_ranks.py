"""mpiop.desired.ranks: the one rank layout the hostfile is written from and the failure report reads back."""

from __future__ import annotations

import pytest

from mpiop.desired import hostfile, ranks
from testkit.mpijobs import MPIJobBuilder, make_mpijob
from testkit.pods import make_pod


@pytest.mark.parametrize(
    ("builder", "pod_index", "expected", "text"),
    [
        (make_mpijob("pi").workers(3).slots(2), 1, range(2, 4), "2-3"),
        (make_mpijob("pi").workers(3), 2, range(2, 3), "2"),
        (make_mpijob("pi").workers(3).slots(2).launcher_as_worker(), 0, range(2, 4), "2-3"),
        (make_mpijob("pi").workers(3).slots(2).launcher_as_worker(), None, range(0, 2), "0-1"),
        (make_mpijob("pi").workers(3).slots(4), None, None, None),
        (make_mpijob("pi").workers(2).gpus(8), 1, range(8, 16), "8-15"),
    ],
    ids=["slots-2", "one-slot", "launcher-as-worker-shifts", "launcher-as-worker-runs-ranks", "launcher-no-ranks",
         "gpus-are-slots"],
)
def test_ranks_of_a_pod(builder: MPIJobBuilder, pod_index: int | None, expected: range | None,
                        text: str | None) -> None:
    job = builder.obj()
    pod = make_pod(job, "launcher") if pod_index is None else make_pod(job, "worker", pod_index)
    found = ranks.ranks_of(job, pod.obj())
    assert found == expected
    assert (ranks.ranks_text(found) if found else None) == text


@pytest.mark.parametrize(
    "builder",
    [make_mpijob("pi").workers(3).slots(2), make_mpijob("pi").workers(2).slots(3).launcher_as_worker(),
     make_mpijob("pi").workers(4), make_mpijob("pi").without("Worker").launcher_as_worker().slots(2)],
    ids=["slots-2", "launcher-as-worker", "one-slot", "launcher-only"],
)
def test_every_rank_is_on_the_pod_whose_ranks_hold_it_in_hostfile_order(builder: MPIJobBuilder) -> None:
    """The hostfile's hosts, rank by rank, are the pods pod_of_rank names, and each holds that rank."""
    job = builder.obj()
    hosts = [line.split()[0].split(":")[0].split(".")[0] for line in hostfile.hostfile(job).splitlines()]
    slots = int(hostfile.hostfile(job).split("slots=")[1].split()[0])
    by_rank = [ranks.pod_of_rank(job, rank) for rank in range(len(hosts) * slots)]
    assert by_rank == [host for host in hosts for _ in range(slots)]
    assert ranks.pod_of_rank(job, len(hosts) * slots) is None
    for rank, pod_name in enumerate(by_rank):
        role = "launcher" if pod_name == "pi-launcher" else "worker"
        index = 0 if role == "launcher" else int(str(pod_name).rsplit("-", 1)[1])
        found = ranks.ranks_of(job, make_pod(job, role, index).obj())
        assert found is not None and rank in found
    assert ranks.rank0_pod(job) == hosts[0]
