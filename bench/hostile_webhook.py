"""`python -m bench.hostile_webhook URL`: the GPU layout webhook flooded from two loopback addresses, bounded in time.

Run by `python -m bench.hostile --attacks webhook` as a process of its own (as bench/hostile_flood.py is). At once,
at URL's /gpu-layout (HTTPS, not verified), until `--seconds` pass or SIGTERM:

* bombs: from each of `--sources` (127.0.0.1 and 127.0.0.2 by default), `--bomb-connections` connections that each
  send an AdmissionReview of `--bomb-kb` KiB gzipped (Content-Encoding gzip, a few KiB on the wire) all but its last
  16 bytes, then hold the connection until the server answers or closes it or the flood ends; then another,
  `--reopen-seconds` later;
* reviews: `--review-connections` loops posting a well-formed review of a total-GPU job whose Worker template has a
  matchFields term of `--match-values` values and `--tolerations` tolerations (each a layout against every node).

One JSON line of what was sent and answered ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import signal
import sys
import time
from collections import Counter

import aiohttp
import orjson
import yarl

from bench.hostile_flood import client_tls
from mpiop.serving.layout_webhook import PATH
from testkit.hostile_layout import admission_review, hostile_job

KEPT_BACK = 16  # bytes of each bomb never sent
TLS = client_tls()  # one context for every connection: making one reads the system's CAs, a blocking call


def bomb(kib: int) -> bytes:
    """An AdmissionReview whose job's name is `kib` KiB of one letter, gzipped: about 1 KiB per MiB."""
    review = admission_review(hostile_job("bomb", "bench", 1))
    review["request"]["object"]["metadata"]["name"] = "b" * (kib * 1024)
    return gzip.compress(orjson.dumps(review), compresslevel=9)


def matching_review(tolerations: int, values: int) -> bytes:
    job = hostile_job("review", "bench-hostile-tenant", tolerations)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [f"x{i}" for i in range(values)]}]}]}}}
    return orjson.dumps(admission_review(job))


async def hold_bombs(url: yarl.URL, source: str, body: bytes, stop: asyncio.Event, tally: Counter[str],
                     reopen: float) -> None:
    """One connection from `source` at a time, the bomb sent but its last bytes, held until closed or `stop`; one
    answered (or closed) is followed `reopen` seconds later by the next."""
    head = (f"POST {PATH} HTTP/1.1\r\nHost: {url.host}\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                url.host, url.port, ssl=TLS, local_addr=(source, 0)), 10)  # a failed handshake: timeout
        except (OSError, TimeoutError):
            tally["connect_failed"] += 1
            await asyncio.sleep(0.2)
            continue
        try:
            writer.write(head + body[:-KEPT_BACK])
            await writer.drain()
            read, stopped = asyncio.create_task(reader.readline()), asyncio.create_task(stop.wait())
            read.add_done_callback(lambda task: task.cancelled() or task.exception())  # a TLS error at close: seen
            await asyncio.wait([read, stopped], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not read.done():
                read.cancel()
            elif read.exception() is not None:
                tally["closed"] += 1
            else:
                status = read.result().split(b" ")
                tally[status[1].decode() if len(status) > 1 else "closed"] += 1
                await asyncio.sleep(reopen)  # answered (not held): the next bomb on a new connection
        except (OSError, ConnectionError):
            tally["closed"] += 1
        finally:
            writer.close()


async def post_reviews(url: str, body: bytes, stop: asyncio.Event, tally: Counter[str]) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=TLS, limit=1),
                                     timeout=aiohttp.ClientTimeout(total=10)) as session:
        while not stop.is_set():
            try:
                async with session.post(url + PATH, data=body, headers={"Content-Type": "application/json"}) as answer:
                    await answer.read()
                    tally[str(answer.status)] += 1
                    if answer.status == 429:  # as the apiserver would: not again before Retry-After (at most 1 s)
                        await asyncio.sleep(min(1.0, float(answer.headers.get("Retry-After", "1"))))
            except (aiohttp.ClientError, OSError, TimeoutError):
                tally["error"] += 1
                await asyncio.sleep(0.05)


async def flood(args: argparse.Namespace) -> dict[str, object]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.call_later(args.seconds, stop.set)
    url, body = yarl.URL(args.url), bomb(args.bomb_kb)
    bombs: Counter[str] = Counter()
    reviews: Counter[str] = Counter()
    started = time.monotonic()
    review = matching_review(args.tolerations, args.match_values)
    tasks = [asyncio.create_task(post_reviews(args.url, review, stop, reviews)) for _ in range(args.review_connections)]
    for index in range(args.bomb_connections):  # 20 handshakes at a time from each source, as a client would
        tasks += [asyncio.create_task(hold_bombs(url, source, body, stop, bombs, args.reopen_seconds))
                  for source in args.sources]
        if index % 20 == 19:
            await asyncio.sleep(0.2)
    await stop.wait()
    for task in tasks:  # whatever is still connecting or posting ends with the flood
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"seconds": round(time.monotonic() - started, 2), "cpu_s": round(time.process_time(), 2),
            "bomb_bytes": len(body), "bomb_inflated_kib": args.bomb_kb,
            "answers": {"bombs": dict(sorted(bombs.items())), "reviews": dict(sorted(reviews.items()))}}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_webhook", description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the status endpoint (https://host:port)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--sources", type=lambda text: text.split(","), default=["127.0.0.1", "127.0.0.2"],
                        help="loopback addresses the bombs come from (default 127.0.0.1,127.0.0.2)")
    parser.add_argument("--bomb-connections", type=int, default=100, help="held per source (default 100)")
    parser.add_argument("--bomb-kb", type=int, default=3064,
                        help="KiB of the job's name in each bomb: inflated, the review is just under 3 MiB (3cc6b1b's "
                             "limit; default %(default)s)")
    parser.add_argument("--reopen-seconds", type=float, default=1.0,
                        help="after a bomb is answered, its connection's next one this much later (default 1)")
    parser.add_argument("--review-connections", type=int, default=8, help="well-formed review loops (default 8)")
    parser.add_argument("--tolerations", type=int, default=100, help="of the reviewed job (default 100)")
    parser.add_argument("--match-values", type=int, default=500, help="of its matchFields term (default 500)")
    args = parser.parse_args()
    if not all(source.startswith("127.") for source in args.sources):
        parser.error("--sources: loopback addresses only (127.x.y.z)")
    print(json.dumps(asyncio.run(flood(args))), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
