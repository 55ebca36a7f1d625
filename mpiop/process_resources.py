"""What `mpiop run` sets up of its own process before it serves: the cyclic GC's threshold, the open files limit and
how glibc's malloc gives large buffers back; and, as it runs, the collections and trims that give back what a flood
of requests left behind.

A pod that reaches the status endpoint chooses the size of what mpiop reads (headers up to the server's limits, TLS
records, bodies up to their limit), so it must not choose how much memory the leader keeps afterwards.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import resource
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

# The cyclic GC, for a process whose garbage is nearly all freed by reference counting (JSON, trimmed objects,
# requests' objects): at CPython's default, a young collection every 700 net allocations, the burst of 200 jobs
# (bench) ran ~400 young, ~36 middle and 3 full collections that found almost nothing, 0.5 s of the operator's
# ~8 s of CPU (its main thread's CPU time inside them). Every 10,000: ~11 young, 1 middle, 0.04 s. Objects of cyclic
# garbage (a caught exception's traceback) wait a little longer to be freed; those a server's refused requests leave
# holding their buffers, no longer than trim_every's next turn.
GC_YOUNG_THRESHOLD = 10_000

# glibc's mallopt(M_MMAP_THRESHOLD): from 128 KiB a buffer is mmap'ed and given back to the kernel when freed. Left to
# glibc, the threshold grows to the largest buffer freed so far (up to 32 MiB), and from then on buffers of that size
# come from the heap, which is not given back: 10 s of a pod posting 480 KB of headers on many connections left the
# leader 56-74 MB larger for good; at a fixed threshold, 2 MB (python -m bench.hostile --attacks flood).
# Fixed just above the buffer of each TLS read (uvloop's SSLProtocol reads into a new bytes of 256 KiB, cut to what
# came): at 128 KiB, each of them was mmap'ed, faulted in and unmapped, the burst's TLS reads 3-4x their CPU (0.4-0.7
# CPU-s of ~9 in a 200-job burst, bench --against 3cc6b1b); the flood's buffers of 480 KB are over it still.
M_MMAP_THRESHOLD = -3
TLS_READ_BYTES = 256 * 1024  # uvloop's SSL_READ_MAX_SIZE
MMAP_THRESHOLD_BYTES = TLS_READ_BYTES + 4096  # the bytes object's header and malloc's own within the page over it
TRIM_SECONDS = 10.0


def set_up() -> None:
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    raise_open_files_limit()
    fix_mmap_threshold()


def raise_open_files_limit() -> None:
    """The soft limit of open files up to the hard one, as Go's runtime does at start: a container's soft limit may be
    1,024, fewer than --status-max-connections beside the apiserver's connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as error:
            log.warning("could not raise the open files limit", soft=soft, hard=hard, error=str(error))


@functools.cache
def _glibc(function: str) -> Callable[..., int] | None:
    """One of glibc's malloc functions, from the symbols the process already has (no search for libc, which
    find_library does by running ldconfig); None where the C library has no such function."""
    found = getattr(ctypes.CDLL(None), function, None)
    if found is None:
        return None
    found.restype = ctypes.c_int
    return found  # type: ignore[no-any-return]


def fix_mmap_threshold(size: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `size` (True when set)."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(size)))


def trim() -> bool:
    """Give the free pages of malloc's heap back to the kernel (glibc's malloc_trim(0): also the free pages between
    chunks still in use, which the heap's own trimming at its top cannot reach). True if any memory was released."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(ctypes.c_size_t(0)))


async def trim_every(seconds: float = TRIM_SECONDS, garbage: Callable[[], int] = lambda: 0) -> None:
    """trim() every `seconds` until cancelled: what the buffers of a burst of connections (TLS records, headers below
    the mmap threshold) left free between live ones goes back, a few milliseconds each time at most.

    Before it, a full collection when `garbage()`, a count of what leaves cyclic garbage that holds buffers
    (server.request_errors), grew since the last one (or from 0): the oldest generation, where such garbage lands,
    is collected seldom, so 10 s of a pod sending 480 KB of headers on many connections left the leader 74 MB larger
    for good, none of it freed by malloc_trim (python -m bench.hostile --attacks flood). A full collection costs in
    proportion to the leader's objects: at most one per `seconds`, and only after such a request."""
    seen = 0
    while True:
        await asyncio.sleep(seconds)
        if (now := garbage()) != seen:
            seen = now
            gc.collect()
        trim()
