"""Node-wide scenarios one at a time when xdist workers share the e2e node: a readers-writer lock across
processes, on two files in the node's workdir (fcntl.flock).

A scenario that changes what every namespace sees (the node's status, cluster-scoped objects, the kubelet's
plugins) or whose timing bounds a neighbour's load could break takes it exclusive; every other scenario shared.
Writer preference, so that an exclusive one is not starved by the other worker's stream of shared ones: a writer
holds the gate while it waits for the readers to drain, and a reader passes the gate before it takes its share.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

GATE, LOCK = "node-wide.gate", "node-wide.lock"


@contextlib.contextmanager
def node_lock(directory: Path, exclusive: bool) -> Iterator[float]:
    """Hold the node's lock (exclusive: alone on the node; else beside other shared holders) for the block; yields
    the seconds waited for it."""
    begin = time.monotonic()
    with (directory / GATE).open("a") as gate, (directory / LOCK).open("a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield time.monotonic() - begin
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
