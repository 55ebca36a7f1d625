"""mpiop.serving.token_reviews: the TokenReviews of the status endpoint in their bounded lane. An answer kept as
data (a refusal raised again and again kept every refused request in its traceback), one review per token at once, at
most `in_flight` reviews, a budget per source address, and bounded caches that drop their oldest entry."""

from __future__ import annotations

import asyncio
import gc
from typing import cast

import aiohttp
import pytest

from mpiop.api.raw import JSON
from mpiop.kube.client import ApiError, KubeClient, Resource
from mpiop.kube.ratelimit import SourceBudget
from mpiop.serving.token_reviews import (
    PostRefusedError,
    Refused,
    Reviewer,
    ReviewLimits,
    TokenReviews,
)
from testkit.waits import until


class Apiserver:
    """KubeClient.create for TokenReviews: a token `good-<pod>` is that pod's in namespace ns, `fail` is a 500, any
    other refused, `cut` a connection closed mid-answer. `hold` keeps every review waiting until released; those in
    flight are counted."""

    def __init__(self, hold: bool = False) -> None:
        self.sent: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        token = body["spec"]["token"]
        self.sent.append(token)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        if token == "fail":
            raise ApiError(500, {"reason": "InternalError"}, "POST", "/apis/authentication.k8s.io/v1/tokenreviews")
        if token == "cut":  # the connection closed mid-answer: aiohttp's own error, no OSError
            raise aiohttp.ClientPayloadError("Response payload is not completed")
        if not token.startswith("good-"):
            return {"status": {"authenticated": False, "error": "invalid bearer token"}}
        pod = token.removeprefix("good-")
        return {"status": {"authenticated": True, "audiences": ["mpiop.kubeflow.org"],
                           "user": {"username": "system:serviceaccount:ns:default",
                                    "extra": {"authentication.kubernetes.io/pod-name": [pod],
                                              "authentication.kubernetes.io/pod-uid": [f"{pod}-uid"]}}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reviews(apiserver: Apiserver, clock: Clock | None = None, **limits: int | float) -> TokenReviews:
    return TokenReviews(cast(KubeClient, apiserver), ReviewLimits(**limits), clock=clock or Clock())  # type: ignore[arg-type]


async def test_a_refusal_is_kept_as_data_and_each_post_raises_its_own_error() -> None:
    """The cached refusal was an exception instance raised by every post of its token: 1,000 posts left 2,000 frames
    on its traceback, each holding its request, until the entry expired."""
    apiserver = Apiserver()
    lane = reviews(apiserver)
    answers = [await lane.review("junk", "10.0.0.1") for _ in range(1000)]
    assert apiserver.sent == ["junk"]
    assert all(answer is answers[0] for answer in answers)
    refused = answers[0]
    assert isinstance(refused, Refused) and (refused.code, refused.reason) == (401, "unauthenticated")
    raised = []
    for _ in range(3):
        try:
            raise refused.error()
        except PostRefusedError as error:
            raised.append(error)
    assert len({id(error) for error in raised}) == 3
    gc.collect()
    kept = [o for o in gc.get_objects() if isinstance(o, PostRefusedError) and o not in raised]
    assert kept == [], "no refusal is kept as an exception"


async def test_a_token_is_reviewed_once_however_many_post_it_at_once() -> None:
    apiserver = Apiserver(hold=True)
    lane = reviews(apiserver)
    posts = [asyncio.create_task(lane.review("good-pa-worker-0", f"10.0.0.{i}")) for i in range(50)]
    await until(lambda: apiserver.in_flight == 1, "the review under way, every post waiting for it")
    apiserver.release.set()
    answers = await asyncio.gather(*posts)
    assert apiserver.sent == ["good-pa-worker-0"]
    assert set(answers) == {Reviewer("ns", "pa-worker-0", "pa-worker-0-uid")}


async def test_a_poster_that_hangs_up_leaves_the_shared_review_to_the_others() -> None:
    apiserver = Apiserver(hold=True)
    lane = reviews(apiserver)
    first = asyncio.create_task(lane.review("good-pa-launcher", "10.0.0.1"))
    second = asyncio.create_task(lane.review("good-pa-launcher", "10.0.0.2"))
    await until(lambda: apiserver.in_flight == 1, "the shared review under way")
    first.cancel()
    apiserver.release.set()
    assert await second == Reviewer("ns", "pa-launcher", "pa-launcher-uid")
    assert apiserver.sent == ["good-pa-launcher"]


async def test_at_most_in_flight_reviews_at_once() -> None:
    apiserver = Apiserver(hold=True)
    lane = reviews(apiserver, in_flight=4)
    posts = [asyncio.create_task(lane.review(f"junk-{i}", f"10.0.0.{i}")) for i in range(12)]
    await until(lambda: apiserver.in_flight == 4, "four reviews under way")
    apiserver.release.set()
    await asyncio.gather(*posts)
    assert (apiserver.most_in_flight, len(apiserver.sent)) == (4, 12)


async def test_past_the_queue_a_new_token_is_a_503_naming_the_limit() -> None:
    """Posters that hang up leave their reviews behind (shielded for the others): the reviews waiting are bounded."""
    apiserver = Apiserver(hold=True)
    lane = reviews(apiserver, in_flight=1, queue=3)
    posts = [asyncio.create_task(lane.review(f"junk-{i}", f"10.0.0.{i}")) for i in range(3)]
    await until(lambda: apiserver.in_flight == 1, "one review under way, two waiting for a slot")
    over = await lane.review("junk-x", "10.0.0.9")
    assert isinstance(over, Refused) and (over.code, over.reason, over.retry_after) == (503, "review_queue", 1)
    assert "--status-review-queue" in over.message
    apiserver.release.set()
    await asyncio.gather(*posts)
    assert isinstance(await lane.review("junk-x", "10.0.0.9"), Refused) and len(apiserver.sent) == 4


async def test_a_source_past_its_budget_is_refused_429_naming_the_limit() -> None:
    """1,000 made-up tokens from one pod were 1,000 TokenReviews; now its burst, then its rate."""
    apiserver, clock = Apiserver(), Clock()
    lane = reviews(apiserver, clock, per_source_qps=5, per_source_burst=20)
    answers = [await lane.review(f"junk-{i}", "10.0.0.1") for i in range(1000)]
    assert len(apiserver.sent) == 20
    over = answers[20]
    assert isinstance(over, Refused) and (over.code, over.reason, over.retry_after) == (429, "review_budget", 1)
    assert "--status-review-per-source-burst" in over.message and "--status-review-per-source-qps" in over.message
    assert isinstance(await lane.review("junk-x", "10.0.0.2"), Refused)  # another source has its own budget
    assert len(apiserver.sent) == 21
    clock.now += 1.0
    for i in range(10):
        await lane.review(f"later-{i}", "10.0.0.1")
    assert len(apiserver.sent) == 26  # 5 a second
    assert isinstance(await lane.review("junk-0", "10.0.0.1"), Refused) and len(apiserver.sent) == 26  # cached


async def test_the_caches_drop_their_oldest_entry_and_refusals_never_push_out_accepted_tokens() -> None:
    """Past 100,000 entries the one cache was cleared whole, the tokens of real pods with it."""
    apiserver = Apiserver()
    lane = reviews(apiserver, cache_size=3, per_source_burst=1000)
    for pod in ("a", "b", "c"):
        await lane.review(f"good-{pod}", "10.0.0.1")
    for i in range(50):
        await lane.review(f"junk-{i}", "10.0.0.1")
    assert lane.cached() == 6
    sent = len(apiserver.sent)
    for pod in ("a", "b", "c"):
        assert await lane.review(f"good-{pod}", "10.0.0.1") == Reviewer("ns", pod, f"{pod}-uid")
    assert len(apiserver.sent) == sent
    await lane.review("good-d", "10.0.0.1")  # the least recently used, a, goes
    await lane.review("good-a", "10.0.0.1")
    assert apiserver.sent[-2:] == ["good-d", "good-a"]


async def test_answers_expire() -> None:
    apiserver, clock = Apiserver(), Clock()
    lane = reviews(apiserver, clock)
    await lane.review("good-a", "10.0.0.1")
    await lane.review("junk", "10.0.0.1")
    clock.now += 11  # refusals are kept 10 s, acceptances 60 s
    await lane.review("good-a", "10.0.0.1")
    await lane.review("junk", "10.0.0.1")
    assert apiserver.sent == ["good-a", "junk", "junk"]
    clock.now += 60
    await lane.review("good-a", "10.0.0.1")
    assert apiserver.sent[-1] == "good-a" and len(apiserver.sent) == 4


async def test_a_review_that_fails_is_a_503_and_not_kept() -> None:
    apiserver = Apiserver()
    lane = reviews(apiserver)
    for _ in range(2):
        answer = await lane.review("fail", "10.0.0.1")
        assert isinstance(answer, Refused) and (answer.code, answer.reason, answer.retry_after) == (
            503, "review_failed", 1)
    assert apiserver.sent == ["fail", "fail"]


async def test_a_review_cut_by_the_connection_is_a_503_for_every_waiter_and_not_kept() -> None:
    """aiohttp.ClientError is no OSError: it escaped the review, and every post waiting on it raised the one
    exception again, its traceback a frame longer each time."""
    apiserver = Apiserver(hold=True)
    lane = reviews(apiserver)
    waiting = [asyncio.create_task(lane.review("cut", "10.0.0.1")) for _ in range(5)]
    await until(lambda: apiserver.in_flight == 1, "the review to be sent")
    apiserver.release.set()
    answers = await asyncio.gather(*waiting)
    assert all(isinstance(a, Refused) and (a.code, a.reason) == (503, "review_failed") for a in answers), answers
    assert "Response payload is not completed" in cast(Refused, answers[0]).message
    assert apiserver.sent == ["cut"] and lane.cached() == 0
    await lane.review("cut", "10.0.0.1")
    assert apiserver.sent == ["cut", "cut"]


@pytest.mark.parametrize(("qps", "burst", "after", "expected"), [
    (5.0, 2, 0.0, [0, 0, 1]),
    (0.5, 1, 0.0, [0, 2]),
    (5.0, 1, 0.2, [0, 0]),  # refilled by then
])
def test_source_budget(qps: float, burst: int, after: float, expected: list[int]) -> None:
    budget = SourceBudget(qps, burst, now=0.0)
    waits = [budget.take(0.0)] + [budget.take(after) for _ in expected[1:]]
    assert waits == expected
