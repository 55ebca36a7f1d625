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
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson
import structlog
from aiohttp import web
from pydantic import ValidationError

from mpiop import metrics, names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob, TrainerStatus
from mpiop.controller.caches import Caches
from mpiop.desired import status_report
from mpiop.kube.client import MPIJOBS, PODS, ApiError, KubeClient
from mpiop.printable import first_unprintable
from mpiop.request_bodies import request_body
from mpiop.server import EveryMinute
from mpiop.serving.token_reviews import PostRefusedError, Refused, Reviewer, TokenReviews

__all__ = ["PostRefusedError", "Reviewer", "StatusWriter", "TokenReviews", "check_reporter", "parse_report",
           "status_app"]

log = structlog.get_logger(__name__)
# `mpiop run`'s --status-addr, --status-url and --status-write-seconds: each default here, once.
PORT = 8443
ADDR = f":{PORT}"
URL = f"https://mpiop-status.mpiop-system.svc:{PORT}"  # deploy/base's Service mpiop-status
WRITE_SECONDS = 10.0  # StatusWriter.interval
BODY_LIMIT = 64 * 1024
REPORT_FIELDS = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_path(namespace: str, name: str) -> None:
    """The URL's namespace and name as Kubernetes names them (so nothing else is logged or looked up); else a 400
    naming the segment."""
    if len(namespace) > 63 or not DNS1123_LABEL.fullmatch(namespace):
        raise PostRefusedError(400, "bad_path", "the path's namespace segment is not a namespace name "
                                                "(a DNS-1123 label: at most 63 of a-z, 0-9, '-')")
    if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        raise PostRefusedError(400, "bad_path", "the path's mpijobs name segment is not an MPIJob name "
                                                "(a DNS-1123 subdomain: at most 253 of a-z, 0-9, '-', '.')")


def its_own_pod(job: MPIJob, pod_name: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod has a name the job's own pods carry (its current attempt's launcher, or a worker below its
    replicas) and the job's labels for that role: anyone who may create pods in the namespace can forge a controller
    reference to the job, but not take the name of a pod the job has."""
    if pod_name == names.launcher_name(job, job.status.restart_count or 0):
        role = names.LAUNCHER_ROLE
    elif (index := names.worker_index(job, pod_name)) is not None and index < job.spec.worker_replicas:
        role = names.WORKER_ROLE
    else:
        return False
    wanted = {**names.job_labels(job), names.JOB_ROLE_LABEL: role}
    return all(labels.get(key) == value for key, value in wanted.items())


def check_reporter(job: JSON | None, pod: JSON | None, namespace: str, name: str, who: Reviewer) -> MPIJob:
    """The job, if the token's pod is one of its pods; else PostRefusedError saying why."""
    key = f"{namespace}/{name}"
    if who.namespace != namespace:  # first: another namespace's pod learns nothing of this one's jobs
        raise PostRefusedError(403, "other_job", f"the token's pod is in namespace {who.namespace}, not {namespace}")
    if job is None:
        raise PostRefusedError(404, "no_job", f"MPIJob {key} not found")
    parsed = MPIJob.model_validate(job)
    if status_report.opted_out(parsed):
        raise PostRefusedError(403, "opted_out", f"MPIJob {key} has {names.REPORT_PROGRESS_ANNOTATION}: \"false\"")
    meta = (pod or {}).get("metadata") or {}
    owners = [o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if pod is None or meta.get("uid") != who.pod_uid or owners != [parsed.metadata.uid]:
        raise PostRefusedError(403, "other_job", f"pod {who.namespace}/{who.pod_name} is not a pod of MPIJob {key}")
    if not its_own_pod(parsed, who.pod_name, meta.get("labels") or {}):
        raise PostRefusedError(403, "not_its_pod", f"pod {who.namespace}/{who.pod_name} names MPIJob {key} as its "
                                                   "controller, but its name or labels are not those of a pod of "
                                                   "the job (its current launcher, or a worker below its "
                                                   "replicas)")
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
    for index, metric in enumerate(report.metrics or []):
        for what, text in (("name", metric.name), ("value", metric.value)):
            # What `mpiop.printable` would escape: `kubectl mpijob status` prints a metric to a terminal.
            if bad := first_unprintable(text):
                raise PostRefusedError(422, "unprintable",
                                       f"trainerStatus.metrics.{index}.{what}: holds U+{ord(bad):04X}, a control "
                                       "character or a format character")
    if report.last_updated_time is None or report.last_updated_time > now:
        report.last_updated_time = now
    return report


@dataclass
class StatusWriter:
    """The last report of each job, written at most once per `interval` seconds per job, and at most
    `in_flight` of them at once: progress is the least urgent write mpiop makes, and a thousand jobs' reports
    sent all at once would queue every reconcile's writes (a new job's first status) behind them at the
    apiserver. A report that waits for its turn is replaced by a newer one meanwhile, so it is never stale.
    A job is kept only while it has a report to write or its interval since the last write runs: one that stops
    reporting (or is deleted) is forgotten then."""

    client: KubeClient
    interval: float = WRITE_SECONDS
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 4
    _slots: asyncio.Semaphore = field(init=False)
    _pending: dict[tuple[str, str], TrainerStatus] = field(default_factory=dict)
    _tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.in_flight)

    def offer(self, namespace: str, name: str, report: TrainerStatus) -> None:
        key = (namespace, name)
        self._pending[key] = report
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._write_while_reported(key), name=f"status-{namespace}/{name}")

    def jobs(self) -> set[tuple[str, str]]:
        """The jobs kept: a report to write, or within their interval after a write."""
        return set(self._tasks) | set(self._pending)

    async def _write_while_reported(self, key: tuple[str, str]) -> None:
        """Write the job's report; then, after the interval, the one posted meanwhile, if any; else forget the job."""
        try:
            while key in self._pending:
                async with self._slots:
                    report = self._pending.pop(key, None)
                    started = self.clock()
                    if report is not None and not await self._write(key, report):
                        self._pending.pop(key, None)  # the job is gone: so are its reports
                        return
                await asyncio.sleep(max(0.0, started + self.interval - self.clock()))
        finally:
            self._tasks.pop(key, None)

    async def _write(self, key: tuple[str, str], report: TrainerStatus) -> bool:
        """Write one report; False when the job is not found."""
        patch = {"status": {"trainerStatus": {**dict.fromkeys(REPORT_FIELDS), **report.to_json()}}}
        try:
            await self.client.patch(MPIJOBS, key[0], key[1], patch, subresource="status")
        except ApiError as error:
            log.warning("a job's progress could not be written", job=f"{key[0]}/{key[1]}", code=error.status,
                        error=error.message[:200])
            return not error.not_found
        except (OSError, RuntimeError) as error:
            log.warning("a job's progress could not be written", job=f"{key[0]}/{key[1]}", error=str(error)[:200])
        return True

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True)
class OwnPod:
    """The pod this process runs in (the downward API's POD_NAME and POD_NAMESPACE). It carries
    names.STATUS_ENDPOINT_LABEL while its status endpoint serves, and the Service mpiop-status selects that label:
    with two replicas, posts reach the leader, the only one serving, and never the standby (which would refuse the
    connection)."""

    namespace: str
    name: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OwnPod | None:
        namespace, name = env.get("POD_NAMESPACE", ""), env.get("POD_NAME", "")
        return cls(namespace, name) if namespace and name else None

    async def mark(self, client: KubeClient, serving: bool) -> bool:
        """Set (or, as a process starts, clear: a restarted container keeps its pod's labels) the label
        names.STATUS_ENDPOINT_LABEL. A refusal is logged, not raised: the endpoint still serves whoever reaches it."""
        try:
            value = names.STATUS_ENDPOINT_SERVING if serving else None
            await client.patch(PODS, self.namespace, self.name,
                               {"metadata": {"labels": {names.STATUS_ENDPOINT_LABEL: value}}})
        except (ApiError, OSError) as error:
            forbidden = isinstance(error, ApiError) and error.forbidden
            log.error("could not label this process's pod for the status Service" + (
                ": its ServiceAccount needs pods patch in its namespace (deploy/base/rbac.yaml)" if forbidden else ""),
                pod=f"{self.namespace}/{self.name}", label=names.STATUS_ENDPOINT_LABEL, serving=serving,
                error=str(error)[:200])
            return False
        return True


def _refusal(refused: PostRefusedError) -> web.Response:
    response = web.json_response({"kind": "Status", "status": "Failure", "code": refused.code,
                                  "reason": refused.reason, "message": refused.message}, status=refused.code)
    if refused.retry_after is not None:
        response.headers["Retry-After"] = str(refused.retry_after)
    return response


REFUSALS_LOGGED = EveryMinute()  # anyone who reaches the endpoint may be refused a thousand times a second


def log_refusal(job: str, refused: PostRefusedError, limit: EveryMinute = REFUSALS_LOGGED) -> None:
    """At most `limit.records` refused posts logged a minute, the next one saying how many were not: every refusal
    is counted in mpiop_status_posts_total all the same."""
    record = logging.makeLogRecord({"msg": "progress post refused"})
    if limit.filter(record):
        log.info(record.getMessage(), job=job, code=refused.code, why=refused.message)


def status_app(caches: Caches, reviews: TokenReviews, writer: StatusWriter,
               now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
               stop_notice: Callable[[MPIJob], JSON | None] = lambda job: None) -> web.Application:
    """`stop_notice`: what a job that is stopping tells its ranks in the 202 (policies/graceful_stop.notice). A slow
    body is bounded by the server's request deadline (server.request_deadline)."""
    async def post(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        try:
            check_path(namespace, name)
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer ") or not header[7:].strip():
                raise PostRefusedError(401, "no_token", "no bearer token: send the file $MPIOP_STATUS_TOKEN names")
            who = await reviews.review(header[7:].strip(), request.remote or "")
            if isinstance(who, Refused):
                raise who.error()
            job = check_reporter(caches.mpijobs.get(f"{namespace}/{name}"),
                                 caches.pods.get(f"{who.namespace}/{who.pod_name}"), namespace, name, who)
            if request.content_length is not None and request.content_length > BODY_LIMIT:
                raise PostRefusedError(413, "too_large", f"the body is over {BODY_LIMIT} bytes")
            async with request_body(request, BODY_LIMIT) as body:  # within the server's bytes in flight
                report = parse_report(body, now())
        except PostRefusedError as refused:
            metrics.STATUS_POSTS.labels(str(refused.code), refused.reason).inc()
            key = f"{namespace}/{name}" if refused.reason != "bad_path" else ascii(f"{namespace}/{name}"[:120])
            log_refusal(key, refused)
            return _refusal(refused)
        except web.HTTPRequestEntityTooLarge:
            metrics.STATUS_POSTS.labels("413", "too_large").inc()
            raise
        writer.offer(namespace, name, report)
        metrics.STATUS_POSTS.labels("202", "accepted").inc()
        stop = stop_notice(job)
        return web.json_response({"kind": "Status", "status": "Success", "code": 202,
                                  **({"stop": stop} if stop else {})}, status=202)

    app = web.Application(client_max_size=BODY_LIMIT)
    app.router.add_post(status_report.path("{namespace}", "{name}"), post)
    return app
