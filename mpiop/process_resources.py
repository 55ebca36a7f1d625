"""What `mpiop run` sets up of its own process before it serves: the cyclic GC's threshold, the open files limit and
how glibc's malloc gives large buffers back.

A pod that reaches the status endpoint chooses the size of what mpiop reads (headers up to the server's limits, TLS
records, bodies up to their limit), so it must not choose how much memory the leader keeps afterwards.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import resource

import structlog

log = structlog.get_logger(__name__)

# The cyclic GC, for a process whose garbage is nearly all freed by reference counting (JSON, trimmed objects,
# requests' objects): at CPython's default, a young collection every 700 net allocations, the burst of 200 jobs
# (bench) ran ~400 young, ~36 middle and 3 full collections that found almost nothing, 0.5 s of the operator's
# ~8 s of CPU (its main thread's CPU time inside them). Every 10,000: ~11 young, 1 middle, 0.04 s. Objects of cyclic
# garbage (a caught exception's traceback) wait a little longer to be freed.
GC_YOUNG_THRESHOLD = 10_000

# glibc's mallopt(M_MMAP_THRESHOLD): from 128 KiB a buffer is mmap'ed and given back to the kernel when freed. Left to
# glibc, the threshold grows to the largest buffer freed so far (up to 32 MiB), and from then on buffers of that size
# come from the heap, which is not given back: 10 s of a pod posting 480 KB of headers on many connections left the
# leader 56-74 MB larger for good; at a fixed threshold, 2 MB (python -m bench.hostile --attacks flood).
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


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


def fix_mmap_threshold(size: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `size` (True when set). Elsewhere (musl, macOS) there is no such threshold to
    fix: False, and nothing changes."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, size))
