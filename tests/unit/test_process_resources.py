"""mpiop.process_resources: what `mpiop run` sets of its own process."""

from __future__ import annotations

import gc
import subprocess
import sys

from mpiop import process_resources

SCRIPT = """
import sys
from mpiop import process_resources
if sys.argv[1] == "fixed":
    assert process_resources.fix_mmap_threshold()
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 // (1 << 20)
before = rss()
kept = []
for _ in range(4):  # requests of 480 KB of headers, each leaving a small buffer alive behind it
    held = []
    for _ in range(64):
        buffer = bytearray(480 * 1024)
        buffer[::4096] = bytes(len(buffer[::4096]))
        held.append(buffer)
        kept.append(bytearray(2000))
    del held
print(rss() - before)
"""


def rss_growth(mode: str) -> int:
    """MiB a child process keeps after 256 buffers of 480 KiB were freed (the threshold is the process's own)."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], check=True, capture_output=True, text=True).stdout
    return int(out)


def test_the_mmap_threshold_is_fixed_so_large_buffers_freed_are_given_back() -> None:
    """glibc's own threshold grows to the buffers' size and keeps them on a heap that small live buffers pin (32 MiB
    kept here); fixed, they go back to the kernel when freed."""
    assert rss_growth("glibc") >= 16
    assert rss_growth("fixed") < 8


def test_set_up_raises_the_gc_threshold_and_keeps_the_open_files_limit_in_bounds() -> None:
    before = gc.get_threshold()
    try:
        process_resources.set_up()
        assert gc.get_threshold()[0] == process_resources.GC_YOUNG_THRESHOLD
    finally:
        gc.set_threshold(*before)
