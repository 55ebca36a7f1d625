"""mpiop.process_resources: what `mpiop run` sets of its own process."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import subprocess
import sys
from collections.abc import Iterator

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from devcluster.controlplane import free_port
from mpiop import process_resources
from mpiop.server import REQUEST_ERRORS, Limits, Servers, request_errors
from testkit.waits import until

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


TLS_READS = """
import resource, sys
from mpiop import process_resources
assert process_resources.fix_mmap_threshold(int(sys.argv[1]))
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):  # a TLS read's buffer, as uvloop asks for one: filled, then freed
    buffer = bytearray(process_resources.TLS_READ_BYTES)
    del buffer
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def page_faults_of_tls_reads(threshold: int) -> int:
    out = subprocess.run([sys.executable, "-c", TLS_READS, str(threshold)], check=True, capture_output=True,
                         text=True).stdout
    return int(out)


def test_a_tls_reads_buffer_is_under_the_threshold_and_reuses_the_heaps_pages() -> None:
    """Over the threshold, each of the 200 buffers is mapped and faulted in anew (64 pages each): what made every TLS
    read of the burst 3-4x its CPU. Under it, the heap's pages are faulted in once."""
    assert page_faults_of_tls_reads(128 * 1024) >= 200 * 64
    assert page_faults_of_tls_reads(process_resources.MMAP_THRESHOLD_BYTES) < 200


def test_set_up_raises_the_gc_threshold_and_keeps_the_open_files_limit_in_bounds() -> None:
    before = gc.get_threshold()
    try:
        process_resources.set_up()
        assert gc.get_threshold()[0] == process_resources.GC_YOUNG_THRESHOLD
    finally:
        gc.set_threshold(*before)


def parse_errors() -> int:
    """aiohttp's parse errors alive in the process."""
    return sum(isinstance(o, BadHttpMessage) for o in gc.get_objects())


@contextlib.contextmanager
def cyclic_gc_off() -> Iterator[None]:
    """No collection but those asked for, as in the leader, whose oldest generation is collected seldom; and the
    server's request errors kept by no log handler (pytest's keeps each record, its exception with it)."""
    gc.collect()
    gc.disable()
    REQUEST_ERRORS.propagate = False
    try:
        yield
    finally:
        REQUEST_ERRORS.propagate = True
        gc.enable()


async def test_requests_the_server_could_not_parse_leave_nothing_once_the_trimmer_ran() -> None:
    """aiohttp keeps the exception of a request it could not parse in a reference cycle with the frame that read it,
    and with the chunk of the request that frame read: 10 s of a pod's 480 KB headers left the leader 74 MB larger
    (bench.hostile --attacks flood), which only a full collection gives back. The trimmer collects after such
    requests; here 20 of them, none freed until it ran."""
    app = web.Application()
    servers, port = Servers(), free_port()
    await servers.start(app, f"127.0.0.1:{port}", "test", None, Limits(max_headers=4))
    head = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 4000) for i in range(10))
    trimmer: asyncio.Task[None] | None = None
    with cyclic_gc_off():
        try:
            errors = request_errors()
            for _ in range(20):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(head + b"\r\n")
                assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.0 400")
                writer.close()
            await until(lambda: request_errors() - errors == 20, "the server counted its 20 parse errors")
            assert parse_errors() >= 20  # the cycles: nothing frees them but the cyclic GC
            trimmer = asyncio.create_task(process_resources.trim_every(0.01, garbage=request_errors))
            await until(lambda: parse_errors() == 0, "the trimmer collected the parse errors")
        finally:
            if trimmer is not None:
                trimmer.cancel()
            await servers.stop()
