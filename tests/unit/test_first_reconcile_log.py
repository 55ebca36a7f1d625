"""The end of a process's first reconcile is logged at info, once: a start's time to working (bench/startup.py,
`bench`'s restart phase), read off the log without debug logging."""

from __future__ import annotations

from structlog.testing import capture_logs

from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.kube.access import ClusterAccess
from mpiop.kube.client import KubeClient


async def test_only_the_first_successful_reconcile_is_logged_at_info() -> None:
    manager = Manager(KubeClient(ClusterAccess("http://127.0.0.1:1")), ManagerConfig(namespace="ns"))
    outcomes: list[BaseException | None] = [RuntimeError("apiserver said no"), None, None]

    async def reconcile(key: str) -> float | None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return None

    manager.reconciler.reconcile = reconcile  # type: ignore[method-assign]
    with capture_logs() as logs:
        for _ in range(3):
            manager.queue.add("ns/pi")
            await manager.queue.get()
            await manager.process("ns/pi")
    manager.queue.shut_down()
    firsts = [line for line in logs if line["event"] == "first reconcile done"]
    assert [line["log_level"] for line in firsts] == ["info"]
    assert 0 < firsts[0]["process_cpu_s"] < 3600  # this process's CPU seconds so far
    assert [line["event"] for line in logs] == ["reconcile failed; retrying with backoff", "reconciled",
                                                "first reconcile done", "reconciled"]
