"""The status endpoint read as an attacker would, against the real apiserver: every pod of every tenant can reach it.

A refused token keeps no request in memory; made-up tokens from one pod cost at most its review budget, not one
TokenReview each; connections are bounded in number (per source), in time (handshake, headers, keep-alive) and in
header size; a pod with a forged controller reference cannot report for the job; a path or a metric that would
reach a log or a terminal raw is refused naming it. Each test here failed on the endpoint before these limits.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import secrets
import ssl
import time
import tracemalloc
from pathlib import Path

import aiohttp

from devcluster.controlplane import ControlPlane, free_port
from mpiop.controller.caches import Caches
from mpiop.kube.client import CONFIGMAPS, PODS, KubeClient
from mpiop.server import Servers
from mpiop.serving import layout_webhook
from mpiop.serving.status_endpoint import PostRefusedError, StatusWriter, TokenReviews, status_app
from testkit.hostile_layout import admission_review
from testkit.metrics import Metrics
from testkit.mpijobs import make_mpijob
from testkit.operator import Cluster, eventually, mpijob
from testkit.process import OperatorProcess
from testkit.progress_posts import client_context, post, status_url
from testkit.rbac import pod_token

BODY = json.dumps({"trainerStatus": {"progressPercentage": 10}}).encode()
PADDING = {f"X-Padding-{i}": "x" * 4000 for i in range(8)}  # 32 KB of headers a request, within every limit


def _traceback_frames(error: BaseException) -> int:
    frames, tb = 0, error.__traceback__
    while tb is not None:
        frames, tb = frames + 1, tb.tb_next
    return frames


async def test_refused_posts_keep_nothing_in_memory(control_plane: ControlPlane, cluster: Cluster) -> None:
    """300 posts of one junk token with 32 KB of headers each. Before, the cached refusal was one exception raised by
    every post, its traceback gathering each post's frames (2 a post) and so each request: 9.6 MB kept here (and 6.3
    GB of RSS from 16 connections in 20 s)."""
    client = await KubeClient.connect(str(control_plane.kubeconfig))
    servers, port = Servers(), free_port()
    writer = StatusWriter(client)
    await servers.start(status_app(Caches.build(client, cluster.ns), TokenReviews(client), writer),
                        f"127.0.0.1:{port}", "the status endpoint")
    url = status_url(f"http://127.0.0.1:{port}", cluster.ns, "pa")
    try:
        async with aiohttp.ClientSession() as session:
            assert (await post(session, url, "junk", BODY, headers=PADDING))[0] == 401  # reviewed once, then cached
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for _ in range(300):
                    code, answer, _ = await post(session, url, "junk", BODY, headers=PADDING)
                    assert (code, answer["reason"]) == (401, "unauthenticated")
                gc.collect()
                grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
        kept = [o for o in gc.get_objects() if isinstance(o, PostRefusedError)]
        frames = max((_traceback_frames(e) for e in kept), default=0)
        print(f"\n300 refused posts with 32 KB of headers: {grown / 1e6:.2f} MB kept, {len(kept)} refusals alive, "
              f"longest traceback {frames} frames")
        assert frames < 10, f"a refusal's traceback holds {frames} frames"
        assert grown < 2_000_000, f"{grown} bytes kept after 300 refused posts"
    finally:
        await servers.stop()
        await writer.close()
        await client.close()


async def _operator(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path, *args: str) -> OperatorProcess:
    op = OperatorProcess.in_namespace(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path, *args)
    await eventually(op.ready, timeout=60, what="/readyz")

    async def listening() -> bool:  # the endpoint serves once leading: a post gets an answer
        try:
            async with aiohttp.ClientSession() as session:
                return (await post(session, status_url(op.status_url, cluster.ns, "x"), None, BODY))[0] == 401
        except aiohttp.ClientError:
            return False

    await eventually(listening, timeout=60, what="the status endpoint")
    return op


def _reviews(scraped: Metrics) -> float:
    return sum(scraped.value("mpiop_api_requests_total", verb="POST", resource="tokenreviews", code=code)
               for code in ("200", "201"))


async def test_made_up_tokens_from_one_pod_cost_its_budget_not_a_review_each(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """1,000 random tokens from one address were 1,000 TokenReviews on the reconciles' client; now at most the
    source's burst (20) and rate (5 a second), the rest a 429 naming the limit. And 50 posts of one new token at once
    are one review."""
    op = await _operator(control_plane, cluster, tmp_path)
    try:
        url = status_url(op.status_url, cluster.ns, "pa")
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # an attacker need not trust the CA
        before = await op.metrics()
        codes: dict[int, int] = {}
        retry_after: set[str] = set()
        started = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as session:
            async def one() -> None:
                code, answer, headers = await post(session, url, secrets.token_urlsafe(32), BODY, context)
                codes[code] = codes.get(code, 0) + 1
                if code == 429:
                    assert answer["reason"] == "review_budget" and "--status-review-per-source-qps" in answer["message"]
                    retry_after.add(headers["Retry-After"])

            await asyncio.gather(*(one() for _ in range(1000)))
            elapsed = time.monotonic() - started
            after = await op.metrics()
            sent = _reviews(after) - _reviews(before)
            print(f"\n1,000 random tokens from one address in {elapsed:.1f}s: {sent:g} TokenReviews, answers {codes}")
            assert sent <= 20 + 5 * elapsed + 5, sent
            assert codes.get(429, 0) >= 1000 - sent - 5 and retry_after <= {"1"}, (codes, retry_after)
            assert after.value("mpiop_status_posts_total", code="429", reason="review_budget") >= codes[429]

            # One token posted by 50 at once: one review (from other addresses' budgets: 127.0.0.2 is loopback too).
            token = secrets.token_urlsafe(32)
            before = await op.metrics()
            shared = aiohttp.TCPConnector(limit=16, local_addr=("127.0.0.2", 0))
            async with aiohttp.ClientSession(connector=shared) as other:
                answers = await asyncio.gather(*(post(other, url, token, BODY, context) for _ in range(50)))
            assert {code for code, _, _ in answers} == {401}
            assert _reviews(await op.metrics()) - _reviews(before) == 1
    finally:
        op.stop()


async def _handshake(host: str, port: int, context: ssl.SSLContext, source: str | None = None) -> tuple[
        asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        local = (source, 0) if source is not None else None
        return await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context, local_addr=local), 30)
    except (OSError, ssl.SSLError, TimeoutError):
        return None


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """How long until the server closed the connection; fails past `seconds`."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except (OSError, ssl.SSLError, TimeoutError):  # TimeoutError: still open after `seconds`
        pass
    return time.monotonic() - started


async def test_connections_are_bounded_in_number_time_and_header_size(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """Defaults: 100 connections from one address, 10 s to finish a handshake, send a request's headers or idle
    between requests, 32 header lines. Before: no cap, aiohttp's 3,630 s keep-alive, 60 s handshakes, 128 headers.
    The source's budget of new connections (burst 100, 20/s: the next test's) is raised out of the way: the 110
    connections would spend it, and whether the slowloris connections after them got one depended on the clock."""
    op = await _operator(control_plane, cluster, tmp_path, "--status-connections-per-source-burst=10000",
                         "--status-connections-per-source-qps=10000")
    held: list[asyncio.StreamWriter] = []
    try:
        host, port = op.status_host, op.status_port
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        opened = await asyncio.gather(*(_handshake(host, port, context) for _ in range(110)))
        held = [pair[1] for pair in opened if pair is not None]
        print(f"\n110 connections from one address: {len(held)} served")
        assert len(held) == 100
        scraped = await op.metrics()
        assert scraped.value("mpiop_status_posts_total", code="0", reason="too_many_source_connections") >= 10
        for writer in held:
            writer.close()
        held = []

        # Slowloris: a handshake never begun; headers begun, never finished; a connection idle after its answer.
        raw_reader, raw = await asyncio.open_connection(host, port)
        held.append(raw)
        slow = await _handshake(host, port, context)
        assert slow is not None
        held.append(slow[1])
        slow[1].write(f"POST {status_url('', cluster.ns, 'pa')} HTTP/1.1\r\nHost: x\r\n".encode())
        idle = await _handshake(host, port, context)
        assert idle is not None
        held.append(idle[1])
        idle[1].write(f"POST {status_url('', cluster.ns, 'pa')} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                      .encode())
        assert (await idle[0].readline()).startswith(b"HTTP/1.1 401")
        waited = await asyncio.gather(_closed_within(raw_reader, 40), _closed_within(slow[0], 40),
                                      _closed_within(idle[0], 40))
        print(f"closed after (s): no handshake {waited[0]:.1f}, unfinished headers {waited[1]:.1f}, "
              f"idle {waited[2]:.1f}")
        assert all(seconds < 25 for seconds in waited), waited

        # Header lines past --status-max-headers: aiohttp's 400, before any handler.
        async with aiohttp.ClientSession() as session:
            many = {f"X-Header-{i}": "x" for i in range(40)}
            code, _, _ = await post(session, status_url(op.status_url, cluster.ns, "pa"), "junk", BODY, context,
                                    headers=many)
            assert code == 400
    finally:
        for writer in held:
            writer.close()
        op.stop()


async def test_one_address_opens_new_connections_within_its_burst_and_rate(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """A burst of 5 and one new connection every 20 s: 8 handshakes at once from 127.0.0.2 (a budget no readiness
    poll spent), 5 served and 3 closed before TLS; closing the 5 gives no new one back, a new one is admitted once
    the budget refilled. Before: every connection within the count had its TLS handshake, a client refused an answer
    reconnecting as fast as it liked."""
    op = await _operator(control_plane, cluster, tmp_path, "--status-connections-per-source-burst=5",
                         "--status-connections-per-source-qps=0.05")
    held: list[asyncio.StreamWriter] = []
    source = "127.0.0.2"
    try:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        opened = await asyncio.gather(*(_handshake(op.status_host, op.status_port, context, source) for _ in range(8)))
        held = [pair[1] for pair in opened if pair is not None]
        assert len(held) == 5
        scraped = await op.metrics()
        assert scraped.value("mpiop_status_posts_total", code="0", reason="too_fast_source_connections") == 3
        assert scraped.value("mpiop_status_posts_total", code="0", reason="too_many_source_connections") == 0
        for writer in held:
            writer.close()
        held = []
        assert await _handshake(op.status_host, op.status_port, context, source) is None  # closed: not a new one

        async def admitted() -> asyncio.StreamWriter | None:
            pair = await _handshake(op.status_host, op.status_port, context, source)
            if pair is None:
                await asyncio.sleep(1)
                return None
            return pair[1]

        held.append(await eventually(admitted, timeout=120, what="a connection admitted after the refill"))
        assert (await op.metrics()).value("mpiop_status_posts_total", code="0",
                                          reason="too_fast_source_connections") >= 4
    finally:
        for writer in held:
            writer.close()
        op.stop()


async def test_forged_pods_paths_and_metrics_are_refused_naming_what(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """A pod anyone who may create pods could make, with a controller reference to the job and its labels, posted
    the job's progress (and could keep a hung job from being caught); a metric with an escape sequence reached
    `kubectl mpijob status` raw; a path segment with one reached the console log."""
    op = await _operator(control_plane, cluster, tmp_path, "--status-write-seconds=1")
    try:
        job = await cluster.create_job(mpijob("pa", workers=1))

        async def made() -> bool:
            return {"pa-worker-0", "pa-launcher"} <= set(await cluster.pods())

        await eventually(made, what="the job's pods")
        own = await cluster.pod("pa-worker-0") or {}
        forged = await cluster.kube.create(PODS, cluster.ns, {
            "apiVersion": "v1", "kind": "Pod",
            # Named as a worker beyond the job's replicas: the owned caches keep only objects under a name of the
            # job's (controller/acceptance), so a pod under any other name is never even seen as the job's.
            "metadata": {"name": "pa-worker-7", "labels": own["metadata"]["labels"],
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pa",
                                              "uid": job["metadata"]["uid"], "controller": True}]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        ca = (await cluster.kube.get(CONFIGMAPS, cluster.ns, "pa-config"))["data"]["mpiop-status-ca.crt"]
        context = client_context(ca)
        url = status_url(op.status_url, cluster.ns, "pa")
        async with aiohttp.ClientSession() as session:
            forged_token = await pod_token(cluster.kube, cluster.ns, forged)  # one review (cached), not one a poll

            async def forged_answer() -> tuple[int, str] | None:
                code, answer, _ = await post(session, url, forged_token, BODY, context)
                return (code, answer.get("reason", "")) if (code, answer.get("reason")) != (403, "other_job") else None

            # The operator's cache holds the forged pod a moment after it is made; until then, "other_job".
            assert await eventually(forged_answer, what="the forged pod in the cache") == (403, "not_its_pod")

            token = await pod_token(cluster.kube, cluster.ns, own)
            escape = json.dumps({"trainerStatus": {"metrics": [{"name": "loss", "value": "0.3\x1b[2J"}]}}).encode()
            code, answer, _ = await post(session, url, token, escape, context)
            assert (code, answer["reason"]) == (422, "unprintable"), answer
            assert answer["message"].startswith("trainerStatus.metrics.0.value: holds U+001B")

            crooked = status_url(op.status_url, cluster.ns, "pa%0Aforged%20log%20line")
            code, answer, _ = await post(session, crooked, token, BODY, context)
            assert (code, answer["reason"]) == (400, "bad_path") and "mpijobs name segment" in answer["message"]
            assert (await post(session, url, token, BODY, context))[0] == 202  # the job's own pod still may
        refused = [line for line in op.json_log() if line.get("event") == "progress post refused"]
        assert any("forged log line" in line["job"] for line in refused)
        assert not any("\n" in line["job"] for line in refused), "the path's newline reached the log"
        scraped = await op.metrics()
        for code_, reason in (("403", "not_its_pod"), ("422", "unprintable"), ("400", "bad_path")):
            assert scraped.value("mpiop_status_posts_total", code=code_, reason=reason) >= 1, reason
    finally:
        op.stop()



async def test_the_layout_webhook_takes_no_encoded_body_no_body_past_the_bytes_in_flight_and_a_source_its_budget(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    """`mpiop run` with the webhook on its status endpoint, reached as any pod reaches it. Before: a 3,300-byte gzip
    body was inflated to 3 MiB as it was read (200 of them held the leader at 1,130 MB), any body up to 3 MiB was
    read from anyone, and one address sent as many reviews as it liked, each laid out on the event loop."""
    op = await _operator(control_plane, cluster, tmp_path, "--gpu-layout", "--gpu-layout-per-source-burst=3",
                         "--gpu-layout-per-source-qps=0.01", "--status-body-bytes-in-flight=1048576")
    review = admission_review(make_mpijob("big", cluster.ns).total_gpus(16).manifest())
    url = op.status_url + layout_webhook.PATH
    try:
        async with aiohttp.ClientSession() as session:
            bomb = gzip.compress(json.dumps(review).encode() + b" " * (3 * 1024 * 1024))
            code, answer, _ = await post(session, url, None, bomb, headers={"Content-Encoding": "gzip"})
            assert (code, answer["reason"]) == (415, "content_encoding") and "Content-Encoding" in answer["message"]
            padded = json.dumps(review).encode() + b" " * (1100 * 1024)  # a review over the 1 MiB in flight
            code, answer, headers = await post(session, url, None, padded)
            assert (code, answer["reason"], headers["Retry-After"]) == (503, "body_bytes_in_flight", "1")
            assert "(--status-body-bytes-in-flight)" in answer["message"]
            for _ in range(2):  # the rest of the address's burst of 3
                code, answer, _ = await post(session, url, None, json.dumps(review).encode())
                assert code == 200 and answer["response"]["allowed"] is True
            code, answer, headers = await post(session, url, None, json.dumps(review).encode())
            assert (code, answer["reason"]) == (429, "source_budget") and 1 <= int(headers["Retry-After"]) <= 100
            assert "(--gpu-layout-per-source-burst, --gpu-layout-per-source-qps)" in answer["message"]
        scraped = await op.metrics()
        assert scraped.value("mpiop_status_posts_total", code="415", reason="content_encoding") == 1
        assert scraped.value("mpiop_status_posts_total", code="503", reason="body_bytes_in_flight") == 1
        assert scraped.value("mpiop_gpu_layout_admissions_total", result="source_budget") == 1
    finally:
        op.stop()
