"""Whose is a token posted to the status endpoint: TokenReviews in a bounded lane of their own.

Any pod of any tenant can reach the endpoint and make up tokens, and each unknown token is a TokenReview the leader
sends. So the reviews go through their own client (their own connections: a reconcile never waits for one), at most
`in_flight` at once; concurrent posts of one token share one review; a source address may start at most `per_source_qps`
reviews a second (a burst of `per_source_burst`), past which it gets a 429 naming the limit; and the answers are kept
in two bounded caches, accepted and refused, each dropping its least recently used entry when full (a flood of made-up
tokens cannot push out the tokens of real pods).

An answer is kept as data (`Reviewer`, `Refused`), never as an exception: a cached exception raised again by every
post of its token gathered each raise's frames in its traceback, so every refused request (its headers and body)
stayed in memory until the entry expired.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import structlog
from cachetools import TTLCache

from mpiop.desired import status_report
from mpiop.kube.client import ApiError, KubeClient, Resource
from mpiop.kube.ratelimit import SourceBudgets

log = structlog.get_logger(__name__)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
REVIEW_SECONDS = 60.0  # a token accepted is trusted this long without asking again
REFUSED_REVIEW_SECONDS = 10.0
REVIEW_TIMEOUT_SECONDS = 10.0  # one TokenReview; past it the post is a 503 and nothing is cached


class PostRefusedError(Exception):
    """A post refused: the HTTP status, a short reason (the metric's label) and the message the client gets; raised
    fresh for each post (see `Refused`)."""

    def __init__(self, code: int, reason: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.retry_after = code, reason, message, retry_after


@dataclass(frozen=True)
class Refused:
    """A refusal as data: what a cache keeps and every post of that token is answered with."""

    code: int
    reason: str
    message: str
    retry_after: int | None = None

    def error(self) -> PostRefusedError:
        return PostRefusedError(self.code, self.reason, self.message, self.retry_after)


@dataclass(frozen=True)
class Reviewer:
    """Who the apiserver says a token belongs to: the pod it was bound to, and the account's namespace."""

    namespace: str
    pod_name: str
    pod_uid: str


@dataclass(frozen=True)
class ReviewLimits:
    """`mpiop run`'s --status-review-* and --status-token-cache-size flags; each default is here, once."""

    in_flight: int = 4  # TokenReviews at once, all sources together
    per_source_qps: float = 5.0  # reviews a source address may start per second (of tokens not cached) ...
    per_source_burst: int = 20  # ... and at once: a node's pods starting together
    cache_size: int = 20_000  # accepted tokens kept; as many refused ones, and as many sources' budgets
    queue: int = 1000  # reviews under way or waiting for a slot; past it a 503 (posts that hung up leave theirs)


class TokenReviews:
    """TokenReview against mpiop's audience, within `limits` (the module's docstring)."""

    def __init__(self, client: KubeClient, limits: ReviewLimits = ReviewLimits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.limits = limits
        self.clock = clock
        self.sent = 0  # TokenReviews sent, for tests and the bench (the apiserver's count is in mpiop_api_requests)
        self._slots = asyncio.Semaphore(limits.in_flight)
        self._accepted: TTLCache[str, Reviewer] = TTLCache(limits.cache_size, REVIEW_SECONDS, timer=clock)
        self._refused: TTLCache[str, Refused] = TTLCache(limits.cache_size, REFUSED_REVIEW_SECONDS, timer=clock)
        self._budgets = SourceBudgets(limits.per_source_qps, limits.per_source_burst, limits.cache_size, clock)
        self._reviewing: dict[str, asyncio.Task[Reviewer | Refused]] = {}

    def cached(self) -> int:
        """Answers kept, accepted and refused."""
        return len(self._accepted) + len(self._refused)

    async def review(self, token: str, source: str) -> Reviewer | Refused:
        """Whose `token` is, posted from address `source`: from the caches, from a review of it under way, or from
        a new one if `source` is within its budget."""
        key = hashlib.sha256(token.encode()).hexdigest()
        found: Reviewer | Refused | None = self._accepted.get(key) or self._refused.get(key)
        if found is not None:
            return found
        reviewing = self._reviewing.get(key)
        if reviewing is None:
            if (wait := self._budgets.take(source)) > 0:
                limits = self.limits
                return Refused(429, "review_budget",
                               f"{source} asked for more than {limits.per_source_burst} token reviews at once or "
                               f"{limits.per_source_qps:g} a second (--status-review-per-source-burst, "
                               f"--status-review-per-source-qps): retry in {wait}s", retry_after=wait)
            if len(self._reviewing) >= self.limits.queue:
                return Refused(503, "review_queue", f"{self.limits.queue} token reviews are under way or waiting "
                                                    "(--status-review-queue): retry in 1s", retry_after=1)
            reviewing = self._reviewing[key] = asyncio.create_task(self._review(key, token), name="token-review")
            reviewing.add_done_callback(lambda _: self._reviewing.pop(key, None))
        # Shielded: a poster that hangs up does not cancel the review the others wait for.
        return await asyncio.shield(reviewing)

    async def _review(self, key: str, token: str) -> Reviewer | Refused:
        """The answer, cached; a review that failed (the apiserver's error, a timeout) is a 503 and not cached."""
        try:
            async with self._slots:
                self.sent += 1
                async with asyncio.timeout(REVIEW_TIMEOUT_SECONDS):
                    found = await self._ask(token)
        # ValueError: an answer that is not JSON; aiohttp.ClientError: a connection closed mid-answer (not an OSError).
        # Any of them escaping would be raised again in every post waiting on this review, its traceback growing.
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            log.warning("a token review failed", error=str(error)[:200])
            return Refused(503, "review_failed", f"the token could not be reviewed now: {str(error)[:200]}",
                           retry_after=1)
        if isinstance(found, Reviewer):
            self._accepted[key] = found
        else:
            self._refused[key] = found
        return found

    async def _ask(self, token: str) -> Reviewer | Refused:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [status_report.AUDIENCE]}}
        status = (await self.client.create(TOKEN_REVIEWS, None, body)).get("status") or {}
        if not status.get("authenticated"):
            why = status.get("error") or "not authenticated"
            return Refused(401, "unauthenticated", f"the token was refused (audience {status_report.AUDIENCE}): {why}")
        if status_report.AUDIENCE not in (status.get("audiences") or []):
            return Refused(401, "unauthenticated", f"the token is not for audience {status_report.AUDIENCE}")
        user = status.get("user") or {}
        parts = str(user.get("username", "")).split(":")
        extra = user.get("extra") or {}
        pod_name, pod_uid = (extra.get(POD_NAME_CLAIM) or [""])[0], (extra.get(POD_UID_CLAIM) or [""])[0]
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pod_name or not pod_uid:
            return Refused(403, "not_a_pod", "the token is not a pod's service-account token")
        return Reviewer(parts[2], pod_name, pod_uid)

    async def close(self) -> None:
        tasks = list(self._reviewing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
