"""`python -m bench.hostile_flood URL`: one "pod" flooding mpiop's status endpoint, bounded in time and bytes.

Run by `python -m bench.hostile` as a process of its own, so its CPU does not slow the bench's own clocks (the
probes, the Lease watch). Three floods at once, all at URL (a job's progress path, HTTPS, not verified):

* junk: the same junk bearer token in every request, with `--header-kb` of headers in all (header lines of 8,000
  bytes, under aiohttp's 8,190 a field and 128 a request);
* random: a fresh random token in every request (each one a TokenReview), with the same headers;
* slow: `--slow-connections` connections that send their request's headers a byte every `--slow-byte-seconds`
  and never finish them.

junk and random run `--concurrency` requests in flight between them, each given up after `--request-timeout`
(an attacker does not wait). Everything stops after `--seconds`, on SIGTERM (the bench's --rss-abort), or once
`--budget-mb` of headers were sent, whichever is first; one JSON line of what was sent and answered ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import signal
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
import yarl

FIELD = 8000  # bytes of one header line's value: under aiohttp's max_field_size (8,190)
MAX_LINES = 100  # header lines a request at most: under aiohttp's max_headers (128)
JUNK_TOKEN = ("junk" * (FIELD // 4))[:FIELD - len("Bearer ")]
BODY = b'{"trainerStatus": {"progressPercentage": 1}}'


def padding(header_kb: float, token_bytes: int) -> dict[str, str]:
    """Header lines of FIELD bytes that, with a token of `token_bytes`, make about `header_kb` KiB of headers."""
    lines = max(0, min(MAX_LINES, round((header_kb * 1024 - token_bytes) / FIELD)))
    return {f"X-Pad-{i}": "p" * FIELD for i in range(lines)}


def header_bytes(headers: dict[str, str]) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers.items())


@dataclass
class Tally:
    """What the flood sent and got: answers by kind and HTTP code ('timeout', 'error' when none)."""

    budget: int
    sent_bytes: int = 0
    answers: dict[str, Counter[str]] = field(default_factory=lambda: {"junk": Counter(), "random": Counter()})
    slow: Counter[str] = field(default_factory=Counter)
    stopped_by: str = "time"

    def spend(self, size: int) -> bool:
        """Count `size` bytes about to be sent; False (and nothing counted) past the budget."""
        if self.sent_bytes + size > self.budget:
            self.stopped_by = "budget"
            return False
        self.sent_bytes += size
        return True


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def requests(kind: str, url: str, workers: int, args: argparse.Namespace, tally: Tally,
                   stop: asyncio.Event) -> None:
    """`workers` loops posting to `url` until `stop`: the junk token or a fresh random one, and the padding."""
    random_token_bytes = 1024
    pad = padding(args.header_kb, FIELD if kind == "junk" else random_token_bytes)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    connector = aiohttp.TCPConnector(limit=workers, ssl=client_tls())
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def loop() -> None:
            while not stop.is_set():
                token = JUNK_TOKEN if kind == "junk" else secrets.token_urlsafe(random_token_bytes * 3 // 4)
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **pad}
                if not tally.spend(header_bytes(headers) + len(BODY)):
                    stop.set()
                    return
                try:
                    async with session.post(url, data=BODY, headers=headers) as response:
                        await response.read()
                        tally.answers[kind][str(response.status)] += 1
                except TimeoutError:
                    tally.answers[kind]["timeout"] += 1
                except (aiohttp.ClientError, OSError):
                    tally.answers[kind]["error"] += 1
                    await asyncio.sleep(0.05)  # refused: do not spin

        await asyncio.gather(*(loop() for _ in range(workers)))


async def slow_connection(url: yarl.URL, index: int, args: argparse.Namespace, tally: Tally,
                          stop: asyncio.Event) -> None:
    """One connection sending its headers a byte at a time until `stop`, never ending them."""
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(url.host, url.port, ssl=client_tls()), args.request_timeout)
    except (OSError, TimeoutError):
        tally.slow["failed"] += 1
        return
    tally.slow["opened"] += 1
    head = f"POST {url.raw_path} HTTP/1.1\r\nHost: {url.host}\r\nX-Slow-{index}: ".encode()
    try:
        writer.write(head)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), args.slow_byte_seconds)
            except TimeoutError:
                writer.write(b"s")
                await writer.drain()
    except (OSError, ConnectionError):
        tally.slow["closed_by_server"] += 1
    finally:
        writer.close()


async def flood(args: argparse.Namespace) -> dict[str, object]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tally = Tally(budget=int(args.budget_mb * 1024 * 1024))

    def on_signal() -> None:
        tally.stopped_by = "signal"
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_signal)
    loop.call_later(args.seconds, stop.set)
    url = yarl.URL(args.url)
    started = time.monotonic()

    async def slow_all() -> None:
        opening = []
        for index in range(args.slow_connections):  # opened 20 at a time, so the handshakes do not come at once
            if stop.is_set():
                break
            opening.append(asyncio.create_task(slow_connection(url, index, args, tally, stop)))
            if index % 20 == 19:
                await asyncio.sleep(0.1)
        await asyncio.gather(*opening)

    junk = max(1, args.concurrency // 2)
    await asyncio.gather(requests("junk", args.url, junk, args, tally, stop),
                         requests("random", args.url, max(1, args.concurrency - junk), args, tally, stop),
                         slow_all())
    # Its own CPU: on a shared machine, how hard the flood could push is bounded by what it got.
    return {"seconds": round(time.monotonic() - started, 2), "cpu_s": round(time.process_time(), 2),
            "stopped_by": tally.stopped_by,
            "header_mb_sent": round(tally.sent_bytes / 1024 / 1024, 1),
            "answers": {kind: dict(sorted(counts.items())) for kind, counts in tally.answers.items()},
            "slow": dict(sorted(tally.slow.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the status endpoint's progress path of one job (https://...)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32, help="junk and random requests in flight")
    parser.add_argument("--header-kb", type=float, default=480.0, help="KiB of headers per request")
    parser.add_argument("--request-timeout", type=float, default=2.0, help="seconds before a request is given up")
    parser.add_argument("--slow-connections", type=int, default=256)
    parser.add_argument("--slow-byte-seconds", type=float, default=1.0)
    parser.add_argument("--budget-mb", type=float, default=2500.0, help="MiB of headers sent at most")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(flood(args))), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
