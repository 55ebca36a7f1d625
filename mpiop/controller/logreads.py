"""Container logs read through `pods/log`, each run of a container once, shared by the failure report's
tail (logtails) and the failed attempt's saved evidence (evidence).

A read is bounded by READ_SECONDS from the moment it starts, and its answer (or why there is none) is kept, so
a kubelet that never answers costs a failed attempt one bound, not one per reader. The failure report's read
starts the attempt's other evidence reads alongside it: the saving then finds them done or under way, and a
restart waits for them all at once. Each log is asked for its last lines (the kubelet's limitBytes counts from
the start of what it sends) and the last KEPT_BYTES of it are kept, what the evidence keeps at most.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

import aiohttp

from mpiop import podstate
from mpiop.desired.evidence import LOG_BYTES, tail_bytes
from mpiop.kube.client import PODS, ApiError, KubeClient
from mpiop.plan import LogSource, Observed

READ_SECONDS = 10.0
TAIL_LINES = 5000
READ_BYTES = 1024 * 1024  # asked of the kubelet; the last KEPT_BYTES of it are kept
KEPT_BYTES = LOG_BYTES


def run_of(observed: Observed, pod: str) -> str:
    """Which run of which pod a log read is of: the observed pod's uid (names recur across attempts), its phase (a
    log read while it ran lacks how it ended) and its containers' restart counts (a container restarted in place
    since has a newer previous run)."""
    found = observed.pod(pod)
    if found is None:
        return ""
    status = found.get("status") or {}
    restarts = [int(c.get("restartCount") or 0) for key in ("initContainerStatuses", "containerStatuses")
                for c in status.get(key) or []]
    return f"{podstate.uid(found)}/{status.get('phase')}/{','.join(map(str, restarts))}"


@dataclass(frozen=True)
class LogRead:
    """A log's text, or (`unreadable`) why there is none."""

    text: str = ""
    unreadable: str = ""

    def evidence(self) -> str:
        """The text, or `(not readable: why)`, as the attempt's ConfigMap records it."""
        return f"(not readable: {self.unreadable})" if self.unreadable else self.text


class LogReads:
    def __init__(self, client: KubeClient, seconds: float = READ_SECONDS, max_entries: int = 128) -> None:
        self.client = client
        self.seconds = seconds
        self.max_entries = max_entries  # at most KEPT_BYTES each
        self._reads: OrderedDict[tuple[str, str, str, bool], asyncio.Task[LogRead]] = OrderedDict()

    def start(self, namespace: str, source: LogSource, run: str) -> asyncio.Task[LogRead]:
        """The read of `source` (of this run of the pod, `run_of`): the one started before, or a new one."""
        key = (run or f"{namespace}/{source.pod}", source.container or "", source.unreadable, source.previous)
        task = self._reads.get(key)
        if task is None:
            task = asyncio.create_task(self._read(namespace, source))
            self._reads[key] = task
            while len(self._reads) > self.max_entries:
                self._reads.popitem(last=False)
        return task

    async def read_all(self, namespace: str, sources: list[tuple[LogSource, str]]) -> list[LogRead]:
        """Each (source, pod run)'s read, started now or before; each is bounded from its own start."""
        return list(await asyncio.gather(*(self.start(namespace, s, run) for s, run in sources)))

    async def _read(self, namespace: str, source: LogSource) -> LogRead:
        if source.unreadable or source.container is None:
            return LogRead(unreadable=source.unreadable or "no container")
        query = {"container": source.container, "tailLines": TAIL_LINES, "limitBytes": READ_BYTES,
                 "previous": source.previous or None}
        try:
            async with asyncio.timeout(self.seconds):
                raw = await self.client.request_raw("GET", PODS.path(namespace, source.pod, "log"), query=query,
                                                    timeout=self.seconds)
        except TimeoutError:
            return LogRead(unreadable=f"no answer within {self.seconds:g} s")
        except (ApiError, OSError, aiohttp.ClientError) as error:
            return LogRead(unreadable=str(error)[:300] or type(error).__name__)
        return LogRead(tail_bytes(raw.decode("utf-8", errors="replace"), KEPT_BYTES))
