"""The endpoint a job's pods post their progress to, and the coalesced writes of status.trainerStatus.

`POST /apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs/{name}/status`, body `{"trainerStatus": {...}}` (Kubeflow
Trainer's, KEP-2779), `Authorization: Bearer <token>`. The token is the pod's projected service-account token of
audience mpiop.kubeflow.org (desired/status_report): a TokenReview against that audience (cached) says whose it
is, and the pod it was bound to must be a pod of that MPIJob (controlled by it, same uid). So only the job's own
pods can write its progress, and the token is good for nothing else: the apiserver refuses its audience.
Every refusal is a 4xx saying why, counted in mpiop_status_posts_total{code,reason}, and writes nothing.

Posts are coalesced: the last report of a job is kept, and written (a merge patch of status.trainerStatus alone)
at most once per `interval` seconds per job, so a thousand ranks posting every second cost the apiserver one
write per job per interval.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson
import structlog
from aiohttp import web
from pydantic import ValidationError

from mpiop import metrics
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob, TrainerStatus
from mpiop.controller.caches import Caches
from mpiop.desired import status_report
from mpiop.kube.client import MPIJOBS, PODS, ApiError, KubeClient, Resource

log = structlog.get_logger(__name__)
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
BODY_LIMIT = 64 * 1024
REVIEW_SECONDS = 60.0  # a token accepted is trusted this long without asking again
REFUSED_REVIEW_SECONDS = 10.0
REPORT_FIELDS = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")
SERVING_LABEL = "mpiop.kubeflow.org/status-endpoint"
SERVING = "serving"


class PostRefusedError(Exception):
    """A post refused: the HTTP status, a short reason (the metric's label) and the message the client gets."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


@dataclass(frozen=True)
class Reviewer:
    """Who the apiserver says a token belongs to: the pod it was bound to, and the account's namespace."""

    namespace: str
    pod_name: str
    pod_uid: str


class TokenReviews:
    """TokenReview against mpiop's audience, cached by the token's hash (accepted and refused alike)."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._cache: dict[str, tuple[float, Reviewer | PostRefusedError]] = {}

    async def review(self, token: str) -> Reviewer:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is None or cached[0] <= now:
            found = await self._ask(token)
            ttl = REVIEW_SECONDS if isinstance(found, Reviewer) else REFUSED_REVIEW_SECONDS
            if len(self._cache) > 100_000:  # tokens of gone pods: forget them all rather than grow
                self._cache.clear()
            cached = self._cache[key] = (now + ttl, found)
        if isinstance(cached[1], PostRefusedError):
            raise cached[1]
        return cached[1]

    async def _ask(self, token: str) -> Reviewer | PostRefusedError:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [status_report.AUDIENCE]}}
        status = (await self.client.create(TOKEN_REVIEWS, None, body)).get("status") or {}
        if not status.get("authenticated"):
            why = status.get("error") or "not authenticated"
            return PostRefusedError(401, "unauthenticated",
                                    f"the token was refused (audience {status_report.AUDIENCE}): {why}")
        if status_report.AUDIENCE not in (status.get("audiences") or []):
            return PostRefusedError(401, "unauthenticated", f"the token is not for audience {status_report.AUDIENCE}")
        user = status.get("user") or {}
        parts = str(user.get("username", "")).split(":")
        extra = user.get("extra") or {}
        pod_name, pod_uid = (extra.get(POD_NAME_CLAIM) or [""])[0], (extra.get(POD_UID_CLAIM) or [""])[0]
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pod_name or not pod_uid:
            return PostRefusedError(403, "not_a_pod", "the token is not a pod's service-account token")
        return Reviewer(parts[2], pod_name, pod_uid)


def check_reporter(job: JSON | None, pod: JSON | None, namespace: str, name: str, who: Reviewer) -> MPIJob:
    """The job, if the token's pod is one of its pods; else PostRefusedError saying why."""
    key = f"{namespace}/{name}"
    if who.namespace != namespace:  # first: another namespace's pod learns nothing of this one's jobs
        raise PostRefusedError(403, "other_job", f"the token's pod is in namespace {who.namespace}, not {namespace}")
    if job is None:
        raise PostRefusedError(404, "no_job", f"MPIJob {key} not found")
    parsed = MPIJob.model_validate(job)
    if status_report.opted_out(parsed):
        raise PostRefusedError(403, "opted_out", f"MPIJob {key} has {status_report.ANNOTATION}: \"false\"")
    meta = (pod or {}).get("metadata") or {}
    owners = [o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if pod is None or meta.get("uid") != who.pod_uid or owners != [parsed.metadata.uid]:
        raise PostRefusedError(403, "other_job", f"pod {who.namespace}/{who.pod_name} is not a pod of MPIJob {key}")
    return parsed


def parse_report(body: bytes, now: dt.datetime) -> TrainerStatus:
    """The body's trainerStatus; lastUpdatedTime is now when missing or in the future (the deadline counts
    from it, so a skewed clock must not push a stall out)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise PostRefusedError(400, "bad_body", f"the body is not JSON: {error}") from None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("trainerStatus"), dict):
        raise PostRefusedError(400, "bad_body", 'the body must be {"trainerStatus": {...}}')
    try:
        report = TrainerStatus.model_validate(decoded["trainerStatus"])
    except ValidationError as error:
        problems = "; ".join(f"trainerStatus.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in error.errors()[:5])
        raise PostRefusedError(422, "out_of_range", problems) from None
    if report.last_updated_time is None or report.last_updated_time > now:
        report.last_updated_time = now
    return report


@dataclass
class StatusWriter:
    """The last report of each job, written at most once per `interval` seconds per job, and at most
    `in_flight` of them at once: progress is the least urgent write mpiop makes, and a thousand jobs' reports
    sent all at once would queue every reconcile's writes (a new job's first status) behind them at the
    apiserver. A report that waits for its turn is replaced by a newer one meanwhile, so it is never stale."""

    client: KubeClient
    interval: float = 10.0
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 4
    _slots: asyncio.Semaphore = field(init=False)
    _pending: dict[tuple[str, str], TrainerStatus] = field(default_factory=dict)
    _last: dict[tuple[str, str], float] = field(default_factory=dict)
    _tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.in_flight)

    def offer(self, namespace: str, name: str, report: TrainerStatus) -> None:
        key = (namespace, name)
        self._pending[key] = report
        if key not in self._tasks:
            wait = max(0.0, self._last.get(key, -self.interval) + self.interval - self.clock())
            self._tasks[key] = asyncio.create_task(self._write_after(key, wait), name=f"status-{namespace}/{name}")

    async def _write_after(self, key: tuple[str, str], wait: float) -> None:
        try:
            await asyncio.sleep(wait)
            async with self._slots:
                report = self._pending.pop(key)
                self._last[key] = self.clock()
                patch = {"status": {"trainerStatus": {**dict.fromkeys(REPORT_FIELDS), **report.to_json()}}}
                await self.client.patch(MPIJOBS, key[0], key[1], patch, subresource="status")
        except ApiError as error:
            log.warning("a job's progress could not be written", job=f"{key[0]}/{key[1]}", code=error.status,
                        error=error.message[:200])
            if error.not_found:
                self._last.pop(key, None)
        except (OSError, RuntimeError) as error:
            log.warning("a job's progress could not be written", job=f"{key[0]}/{key[1]}", error=str(error)[:200])
        finally:
            self._tasks.pop(key, None)
            if key in self._pending:  # a post came in while writing: its turn after the interval
                self.offer(key[0], key[1], self._pending[key])

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class OwnPod:
    """The pod this process runs in (the downward API's POD_NAME and POD_NAMESPACE). It carries SERVING_LABEL
    while its status endpoint serves, and the Service mpiop-status selects that label: with two replicas, posts
    reach the leader, the only one serving, and never the standby (which would refuse the connection)."""

    namespace: str
    name: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OwnPod | None:
        namespace, name = env.get("POD_NAMESPACE", ""), env.get("POD_NAME", "")
        return cls(namespace, name) if namespace and name else None

    async def mark(self, client: KubeClient, serving: bool) -> bool:
        """Set (or, as a process starts, clear: a restarted container keeps its pod's labels) SERVING_LABEL.
        A refusal is logged, not raised: the endpoint still serves whoever reaches it."""
        try:
            await client.patch(PODS, self.namespace, self.name,
                               {"metadata": {"labels": {SERVING_LABEL: SERVING if serving else None}}})
        except (ApiError, OSError) as error:
            forbidden = isinstance(error, ApiError) and error.forbidden
            log.error("could not label this process's pod for the status Service" + (
                ": its ServiceAccount needs pods patch in its namespace (deploy/base/rbac.yaml)" if forbidden else ""),
                pod=f"{self.namespace}/{self.name}", label=SERVING_LABEL, serving=serving, error=str(error)[:200])
            return False
        return True


def status_app(caches: Caches, reviews: TokenReviews, writer: StatusWriter,
               now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> web.Application:
    async def post(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        try:
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer ") or not header[7:].strip():
                raise PostRefusedError(401, "no_token", "no bearer token: send the file $MPIOP_STATUS_TOKEN names")
            who = await reviews.review(header[7:].strip())
            check_reporter(caches.mpijobs.get(f"{namespace}/{name}"),
                           caches.pods.get(f"{who.namespace}/{who.pod_name}"), namespace, name, who)
            if request.content_length is not None and request.content_length > BODY_LIMIT:
                raise PostRefusedError(413, "too_large", f"the body is over {BODY_LIMIT} bytes")
            report = parse_report(await request.read(), now())
        except PostRefusedError as refused:
            metrics.STATUS_POSTS.labels(str(refused.code), refused.reason).inc()
            log.info("progress post refused", job=f"{namespace}/{name}", code=refused.code, why=refused.message)
            return web.json_response({"kind": "Status", "status": "Failure", "code": refused.code,
                                      "reason": refused.reason, "message": refused.message}, status=refused.code)
        except web.HTTPRequestEntityTooLarge:
            metrics.STATUS_POSTS.labels("413", "too_large").inc()
            raise
        writer.offer(namespace, name, report)
        metrics.STATUS_POSTS.labels("202", "accepted").inc()
        return web.json_response({"kind": "Status", "status": "Success", "code": 202}, status=202)

    app = web.Application(client_max_size=BODY_LIMIT)
    app.router.add_post(status_report.path("{namespace}", "{name}"), post)
    return app
