"""mpiop.policies.launcher_creation: AtStartup creates the launcher with the workers, WaitForWorkersReady
once every worker of the current attempt is Ready."""

from __future__ import annotations

import pytest

from mpiop.policies import launcher_creation
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod, observe


def test_at_startup_allows_the_launcher_before_any_worker_exists() -> None:
    job = make_mpijob("pi").workers(2).launcher_creation_policy("AtStartup").obj()
    assert launcher_creation.launcher_may_start(job, observe(job), attempt=0) is True


@pytest.mark.parametrize(
    ("workers", "launcher_made"),
    [
        ([], False),
        (["pending", "pending"], False),
        (["running", "running"], False),
        (["ready", "running"], False),
        (["ready"], False),
        (["ready", "ready-terminating"], False),
        (["ready", "ready"], True),
        (["ready", None, "ready"], False),
    ],
    ids=["no-workers", "pending", "running-not-ready", "one-ready", "one-missing", "one-terminating", "all-ready",
         "gap-filled-by-extra-worker"],
)
def test_wait_for_workers_ready_holds_the_launcher(workers: list[str | None], launcher_made: bool) -> None:
    job = make_mpijob("pi").workers(2).wait_for_workers_ready().obj()
    pods = []
    for index, state in enumerate(workers):
        if state is None:
            continue
        pod = make_pod(job, "worker", index)
        if state.startswith("running"):
            pod.running()
        if state.startswith("ready"):
            pod.ready()
        if state.endswith("terminating"):
            pod.terminating()
        pods.append(pod.obj())
    assert launcher_creation.launcher_may_start(job, observe(job, pods), attempt=0) is launcher_made


def test_ready_workers_of_an_old_attempt_do_not_count() -> None:
    job = make_mpijob("pi").workers(1).wait_for_workers_ready().status(restart_count=1).obj()
    pods = [make_pod(job, "worker", 0, attempt=0).ready().obj()]
    assert launcher_creation.launcher_may_start(job, observe(job, pods), attempt=1) is False
