"""The work queue's gauges, as client-go exports them: a stuck worker shows at scrape time."""

from __future__ import annotations

from prometheus_client import REGISTRY

from mpiop import metrics
from mpiop.controller.workqueue import WorkQueue
from testkit.clock import FakeClock


def scraped() -> tuple[float | None, float | None, float | None]:
    return (REGISTRY.get_sample_value("mpiop_workqueue_depth"),
            REGISTRY.get_sample_value("mpiop_workqueue_longest_running_processor_seconds"),
            REGISTRY.get_sample_value("mpiop_workqueue_unfinished_work_seconds"))


async def test_a_stuck_worker_shows_in_longest_running_and_unfinished_work() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    metrics.observe_queue(queue)
    assert scraped() == (0, 0, 0)
    for key in ("ns/a", "ns/b", "ns/c"):
        queue.add(key)
    assert scraped() == (3, 0, 0)
    a = await queue.get()
    clock.step(10)
    b = await queue.get()
    clock.step(5)  # a has been at it 15 s, b 5 s
    assert scraped() == (1, 15, 20)
    queue.done(a)
    assert scraped() == (1, 5, 5)
    queue.done(b)
    assert scraped() == (1, 0, 0)
