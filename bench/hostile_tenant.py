"""The hostile tenant of `python -m bench.hostile`: the costliest total-GPU job the CRD accepts
(testkit/hostile_layout.py), GPU nodes whose taints make each of its layouts scan its tolerations, one node's label
touched every `touch_seconds` (each change lays the job out again), and the job's AdmissionReview posted to the
GPU layout webhook directly."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from bench.hostile_flood import client_tls
from bench.report import log
from mpiop.api.raw import JSON
from mpiop.kube.client import MPIJOBS, NODES, ApiError, KubeClient
from mpiop.serving.layout_webhook import PATH
from testkit.hostile_layout import TOUCH_LABEL, admission_review, hostile_job, tainted_gpu_nodes

NODE_PREFIX = "hostile-gpu"
JOB = "hostile"


async def create_nodes(kube: KubeClient, count: int) -> list[str]:
    """The tainted GPU nodes, 32 creations in flight; their names."""
    semaphore = asyncio.Semaphore(32)
    nodes = tainted_gpu_nodes(NODE_PREFIX, count)

    async def one(node: JSON) -> None:
        async with semaphore:
            await kube.create(NODES, None, node)

    await asyncio.gather(*(one(n) for n in nodes))
    return [n["metadata"]["name"] for n in nodes]


@dataclass
class Tenant:
    """What the tenant did and saw: how many tolerations the apiserver took (halved after each refusal), how long
    the job's creation took (the apiserver calls the webhook, 5 s at most), label touches, and each direct post
    to the webhook: seconds to its answer (None: none within the timeout) and what it answered."""

    namespace: str
    tolerations: int = 0
    refused: list[str] = field(default_factory=list)
    create_s: float | None = None
    touches: int = 0
    posts: list[tuple[float | None, str]] = field(default_factory=list)

    async def create_job(self, kube: KubeClient, tolerations: int) -> None:
        count = tolerations
        while count >= 1:
            job = hostile_job(JOB, self.namespace, count)
            started = time.monotonic()
            try:
                await kube.create(MPIJOBS, self.namespace, job)
            except ApiError as error:
                self.refused.append(f"{count}: {error.status} {error.message[:120]}")
                log(f"tenant: {count} tolerations refused ({error.status}); halving")
                count //= 2
                continue
            self.create_s, self.tolerations = round(time.monotonic() - started, 3), count
            log(f"tenant: job {JOB} (gpus 13, {count} tolerations) created in {self.create_s}s")
            return

    async def touch(self, kube: KubeClient, node: str, every: float, stop: asyncio.Event) -> None:
        """Change one label of `node` every `every` seconds until `stop`."""
        while not stop.is_set():
            try:
                await kube.patch(NODES, None, node, {"metadata": {"labels": {TOUCH_LABEL: str(self.touches)}}})
                self.touches += 1
            except (ApiError, OSError, TimeoutError) as error:
                log(f"tenant: touching {node}: {error!s:.120}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)

    async def post_reviews(self, url: str, count: int, spread: float, timeout: float, stop: asyncio.Event,
                           tolerations: int) -> None:
        """`count` direct posts of the job's AdmissionReview to the webhook, one after another, spread over `spread`
        seconds: the job with as many tolerations as the apiserver took (`tolerations` until it answered)."""
        started = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls()),
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            for index in range(count):
                due = started + (index + 1) * spread / (count + 1)
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
                    return
                except TimeoutError:
                    pass
                body = orjson.dumps(admission_review(hostile_job(JOB, self.namespace, self.tolerations or tolerations)))
                sent = time.monotonic()
                try:
                    async with session.post(url + PATH, data=body,
                                            headers={"Content-Type": "application/json"}) as response:
                        answer = orjson.loads(await response.read()) if response.status == 200 else {}
                        said = (answer.get("response") or {}).get("warnings") or [f"HTTP {response.status}"]
                        self.posts.append((round(time.monotonic() - sent, 3), str(said[0])[:80]))
                except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError) as error:
                    self.posts.append((None, type(error).__name__))
                log(f"tenant: AdmissionReview posted to the webhook: {self.posts[-1]}")
