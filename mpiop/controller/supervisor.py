"""Every background task of the process, watched: informers, workers, the resync timer, the elector.

A long-lived task that ends while the process is not stopping (an exception, or a loop that returned) is
a state mpiop cannot recover from in place: a frozen cache or a missing worker would leave `/readyz` green
while nothing is reconciled. So the end is logged with its traceback, `/healthz` fails naming the task,
and the process's stop events are set: it shuts down and exits 1, and Kubernetes restarts it with fresh
caches (controller-runtime's manager does the same when a runnable fails). An informer recovers from the
apiserver's own failures itself, by re-listing; what reaches the supervisor is what it could not.
Short-lived helper tasks (`daemon=False`) may end, but their exceptions count the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class Supervisor:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.failed = asyncio.Event()
        self._stops: list[asyncio.Event] = []
        self._daemons: set[asyncio.Task[Any]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()  # strong references: the loop keeps only weak ones

    def stop_on_failure(self, stop: asyncio.Event) -> None:
        """Set `stop` when a task fails (at once if one already has)."""
        self._stops.append(stop)
        if self.failures:
            stop.set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, daemon: bool = True) -> asyncio.Task[Any]:
        """Run `coro` as a task named `name`; a daemon must run until cancelled or until the process stops."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        if daemon:
            self._daemons.add(task)
        task.add_done_callback(self._ended)
        return task

    def _stopping(self) -> bool:
        return any(stop.is_set() for stop in self._stops)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        daemon = task in self._daemons
        self._daemons.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None and (not daemon or self._stopping()):
            return
        self.fail(task.get_name(), error)

    def fail(self, name: str, error: BaseException | None) -> None:
        """Record that `name` died (or ended), log it, fail /healthz and stop the process."""
        why = f"{name} died: {type(error).__name__}: {error}" if error is not None else f"{name} ended"
        log.error("background task ended: failing /healthz and stopping the process", task=name,
                  error=None if error is None else f"{type(error).__name__}: {error}", exc_info=error)
        self.failures.append(why)
        self.failed.set()
        for stop in self._stops:
            stop.set()

    def healthz(self) -> str | None:
        """The /healthz check: None while no task has failed."""
        return "; ".join(self.failures) or None
