"""mpiop.controller.logreads.run_of: a log read is shared only while it is of the same run of the same pod."""

from __future__ import annotations

from mpiop.controller.logreads import run_of
from mpiop.plan import Observed
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi", "ns").workers(1).obj()


def _run(*pods: dict[str, object]) -> str:
    return run_of(Observed(pods=list(pods)), "pi-launcher")


def test_a_read_is_of_one_run_of_one_pod() -> None:
    running = make_pod(JOB, "launcher").started().obj()
    failed = make_pod(JOB, "launcher").failed().obj()
    restarted = make_pod(JOB, "launcher").restarted().obj()
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    again = make_pod(JOB, "launcher").restarted().obj()
    again["status"]["containerStatuses"][0]["restartCount"] = 2
    next_attempt = make_pod(JOB, "launcher", 0, 1).started().obj()
    next_attempt["metadata"]["name"] = "pi-launcher"  # a name that recurs, another pod
    runs = [_run(p) for p in (running, failed, restarted, again, next_attempt)]
    assert len(set(runs)) == len(runs), runs
    assert _run(make_pod(JOB, "launcher").failed().obj()) == runs[1], "the same run: the read is shared"
    assert _run() == ""
