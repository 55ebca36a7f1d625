"""The mutating admission webhook that lays out a total-GPU job (spec.gpus) as it is created.

Laid out by the controller, a job is first stored as written (1 worker, no GPU), and whatever acts on a new job
before mpiop's first pass sees that: Kueue makes its Workload of the job as written, admits it within about a
second and resumes the job, then stops it again once mpiop writes the layout (docs/api.md, "Under Kueue"). Laid
out here, in the request that creates it, the job is stored laid out: Kueue, kubectl and every later pass see one
ordinary v2beta1 job from the start.

The webhook never refuses (the CRD's CEL rules do): it answers allowed, with a JSON patch when the job is laid
out, or with a warning saying why not (no node fits, nodes not watched yet) and no patch, and the controller then
lays the job out or sets Running=False as before. It serves on the status endpoint's HTTPS server, so only the
leader answers (its Service selects the leader's pod); the leader writes its CA into the webhook's configuration
(`install_ca_bundle`) once it serves. failurePolicy Ignore: with mpiop down, jobs are still created.

Any pod can reach that server, and the apiserver presents no identity a webhook can check, so the webhook checks what
it can: a source address may send it `per_source_qps` reviews a second (a burst of `per_source_burst`; past them a
429); it answers only a well-formed AdmissionReview (admission.k8s.io/v1) of a kubeflow.org/v2beta1 MPIJob (else
400), of at most BODY_LIMIT bytes (else 413), read within the server's bytes in flight (request_bodies.request_body); it
reads and lays out LAYOUTS_AT_ONCE review at a time, off the event loop (the loop renews the leader's Lease), its
work bounded by --gpu-layout-max-entries; and its warning names no node, label or taint, nor how many nodes each
part of the template leaves out (the job's Running condition says that, to whoever may read the job), since
whoever reaches the webhook may not read nodes.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson
import structlog
from aiohttp import web
from pydantic import ValidationError

from mpiop import metrics, names
from mpiop.api.merge import merged
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.kube.client import ApiError, KubeClient, Resource
from mpiop.kube.ratelimit import SourceBudgets
from mpiop.plan import MESSAGE_LIMIT
from mpiop.policies import gpu_layout
from mpiop.printable import printable
from mpiop.request_bodies import refusal, request_body

log = structlog.get_logger(__name__)
PATH = "/gpu-layout"
CONFIGURATION = "mpiop-gpu-layout"  # --gpu-layout-webhook's default, once: deploy/base/webhook.yaml's name
# The largest AdmissionReview read: the largest MPIJob etcd stores (its --max-request-bytes, 1.5 MiB: a larger job
# is refused whatever the webhook says), and 64 KiB for the review around it. More than the status endpoint's 64 KiB,
# which a job with a long template outgrows.
MAX_OBJECT_BYTES = 1536 * 1024
BODY_LIMIT = MAX_OBJECT_BYTES + 64 * 1024
LAYOUTS_AT_ONCE = 1  # reviews read, parsed and laid out at once: each holds its body and job, and a thread
NO_FIT = "spec.gpus: the job waits until a layout fits (its Running condition says why)"
LOGGED_NAME_LIMIT = 253  # a job's name as logged (a DNS-1123 subdomain's length)
MPIJOB_KIND = {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"}
WARNING_LIMIT = 256  # the apiserver may truncate a longer admission warning
CONFIGURATIONS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                          "MutatingWebhookConfiguration", namespaced=False)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Answer:
    """What the webhook says of one new job: the JSON patch laying it out, a warning for the user, and the
    result counted in mpiop_gpu_layout_admissions_total (None: not a job to lay out)."""

    patch: list[JSON] = field(default_factory=list)
    warning: str | None = None
    result: str | None = None


def layout_patch(raw: JSON, nodes: list[JSON] | None, max_entries: int, dra: gpu_layout.Dra | None = None,
                 detail: bool = False) -> Answer:
    """The patch laying out a new job: spec replaced whole with the laid-out one (the merge patch the controller
    would write, applied) and the record annotation added; or why not. `dra`: the ResourceSlices and DeviceClasses
    a job through DRA counts. Its ResourceClaimTemplate is the controller's to make (the job has no uid yet).
    `detail`: the caller is the apiserver (a verified client certificate), so a warning may say why no layout fits
    (how many nodes each part of the template leaves out, never which) to the job's creator."""
    try:
        job = MPIJob.model_validate(raw)
    except ValidationError as error:
        return Answer([], f"mpiop did not lay this job out: it does not parse ({error.errors()[0]['msg']})",
                      "unparsed")
    if not gpu_layout.needs_layout(job):
        return Answer()
    if nodes is None:
        return Answer([], "spec.gpus: mpiop does not watch nodes yet; it lays the job out once it does", "no_nodes")
    if (over := gpu_layout.over_limit(job, max_entries)) is not None:
        return Answer([], _cut(f"spec.gpus: mpiop does not lay this job out: {over}"), "over_limit")
    chosen = gpu_layout.choose(job, nodes, max_entries, dra)
    if isinstance(chosen, str):
        return Answer([], _cut(NO_FIT + (f": {chosen}" if detail else "")), "no_fit")
    layout, record = chosen
    record = record[:MESSAGE_LIMIT - len(gpu_layout.AT_ADMISSION)] + gpu_layout.AT_ADMISSION
    merge = gpu_layout.layout_patch(job, layout, record)
    spec = merged(raw.get("spec") or {}, merge["spec"])
    annotations = (raw.get("metadata") or {}).get("annotations")
    annotation: JSON = ({"op": "add", "path": f"/metadata/annotations/{_pointer(names.GPU_LAYOUT_ANNOTATION)}",
                         "value": record} if annotations is not None else
                        {"op": "add", "path": "/metadata/annotations", "value": {names.GPU_LAYOUT_ANNOTATION: record}})
    return Answer([{"op": "replace", "path": "/spec", "value": spec}, annotation], None, "laid_out")


def _cut(warning: str) -> str:
    return warning if len(warning) <= WARNING_LIMIT else warning[:WARNING_LIMIT - 3] + "..."


def malformed(admission: object) -> str | None:
    """Why `admission` is not an AdmissionReview this webhook answers (None: it is one): admission.k8s.io/v1, a
    request with a uid, for a kubeflow.org/v2beta1 MPIJob, and the object itself when it is created."""
    if not isinstance(admission, dict) or (admission.get("apiVersion"), admission.get("kind")) != (
            "admission.k8s.io/v1", "AdmissionReview"):
        return "the body is not an admission.k8s.io/v1 AdmissionReview"
    request = admission.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        return "the AdmissionReview has no request with a uid"
    if request.get("kind") != MPIJOB_KIND:
        return "this webhook answers only for kubeflow.org/v2beta1 MPIJobs, not " + (
            "/".join(str(v) for v in request["kind"].values())[:100] if isinstance(request.get("kind"), dict) else
            "a request without a kind")
    if not isinstance(request.get("operation"), str):
        return "the AdmissionReview's request has no operation"
    if request["operation"] == "CREATE" and not isinstance(request.get("object"), dict):
        return "the AdmissionReview creates no object"
    return None


@dataclass(frozen=True)
class Reviewed:
    """The AdmissionReview answering a request, and what the webhook said of its job (`answer.result`: what
    mpiop_gpu_layout_admissions_total counts, None when there was no job to lay out)."""

    admission: JSON
    answer: Answer
    request: JSON = field(default_factory=dict)  # the AdmissionReview answered


def review(admission: JSON, nodes: list[JSON] | None, max_entries: int, dra: gpu_layout.Dra | None = None,
           detail: bool = False) -> Reviewed:
    """The AdmissionReview answering `admission` (admission.k8s.io/v1, which `malformed` found well-formed): always
    allowed. Pure: the HTTP handler counts the result and logs."""
    request = admission["request"]
    response: JSON = {"uid": request["uid"], "allowed": True}
    answer = Answer()
    if request["operation"] == "CREATE":
        answer = layout_patch(request["object"], nodes, max_entries, dra, detail)
        if answer.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(answer.patch)).decode()
        if answer.warning:
            response["warnings"] = [answer.warning]
    return Reviewed({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}, answer,
                    admission)


def record(admission: JSON, answer: Answer) -> None:
    """Count the answer in mpiop_gpu_layout_admissions_total and log a job laid out or warned about."""
    if answer.result is not None:
        metrics.GPU_LAYOUT_ADMISSIONS.labels(answer.result).inc()
    if answer.patch or answer.warning:
        request = admission["request"]
        meta = request["object"].get("metadata") or {}
        job = f"{request.get('namespace')}/{meta.get('name') or meta.get('generateName')}"
        # Cut and escaped whatever the result: the apiserver validates a name after the mutating webhooks.
        log.info("admission: total-GPU job", job=printable(job[:LOGGED_NAME_LIMIT]),
                 laid_out=bool(answer.patch), warning=answer.warning)


@dataclass(frozen=True)
class WebhookLimits:
    """`mpiop run`'s --gpu-layout-per-source-* flags; each default is here, once. The apiserver is one source (a
    few, with several apiservers), a review per MPIJob created: a burst of jobs created at once past the burst is
    laid out by the controller just after (failurePolicy Ignore)."""

    per_source_qps: float = 20.0  # reviews a source address may send a second ...
    per_source_burst: int = 50  # ... and at once
    sources: int = 10_000  # sources whose budget is kept, the least recently seen dropped


def answer_body(body: bytes, nodes: list[JSON] | None, max_entries: int, dra: gpu_layout.Dra | None,
                detail: bool = False) -> tuple[int, bytes, Reviewed | None]:
    """The HTTP status and body answering `body`, and the review (None when refused): pure, and run in a thread."""
    try:
        admission = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        return 400, f"the body is not an AdmissionReview: {error}".encode(), None
    if (why := malformed(admission)) is not None:
        return 400, why.encode(), None
    reviewed = review(admission, nodes, max_entries, dra, detail)
    return 200, orjson.dumps(reviewed.admission), reviewed


def add_route(app: web.Application, nodes: Callable[[], list[JSON] | None], max_entries: int,
              dra: Callable[[], gpu_layout.Dra] | None = None, limits: WebhookLimits = WebhookLimits(),
              clock: Callable[[], float] = time.monotonic, verified_clients_only: bool = False) -> None:
    """POST PATH on `app`: `nodes()` gives the cached GPU nodes (None while not watched or not synced), `dra()` the
    cached ResourceSlices and DeviceClasses; `max_entries`: --gpu-layout-max-entries. The body may be up to
    BODY_LIMIT, whatever the app's own limit. `verified_clients_only` (--gpu-layout-client-ca): the server's TLS
    asks for a client certificate and verifies one given against that CA (server.trust_clients); a request
    without one is a 403 before anything else, and a review from one is told why no layout fits."""
    budgets = SourceBudgets(limits.per_source_qps, limits.per_source_burst, limits.sources, clock)
    turn = asyncio.Semaphore(LAYOUTS_AT_ONCE)
    laying_out = ThreadPoolExecutor(LAYOUTS_AT_ONCE, thread_name_prefix="gpu-layout")  # few threads, few arenas

    async def handle(request: web.Request) -> web.Response:
        if verified_clients_only and not (request.transport and request.transport.get_extra_info("peercert")):
            metrics.GPU_LAYOUT_ADMISSIONS.labels("unauthenticated").inc()
            return refusal(403, "unauthenticated", "this webhook answers only the apiserver: a client certificate "
                                                   "signed by the CA of the operator's --gpu-layout-client-ca")
        source = request.remote or ""
        if (wait := budgets.take(source)) > 0:
            metrics.GPU_LAYOUT_ADMISSIONS.labels("source_budget").inc()
            return refusal(429, "source_budget", f"{source!a} sent more than {limits.per_source_burst} reviews "
                                                 f"at once or {limits.per_source_qps:g} a second "
                                                 "(--gpu-layout-per-source-burst, --gpu-layout-per-source-qps): "
                                                 f"retry in {wait}s", retry_after=wait)
        if request.content_length is not None and request.content_length > BODY_LIMIT:
            return _too_large()
        try:
            async with request_body(request, BODY_LIMIT) as body, turn:  # a slow body does not hold the turn
                status, answer, reviewed = await asyncio.get_running_loop().run_in_executor(
                    laying_out, answer_body, body, nodes(), max_entries, dra() if dra is not None else None,
                    verified_clients_only)
        except web.HTTPRequestEntityTooLarge:
            return _too_large()
        if reviewed is None:
            return web.Response(status=status, text=answer.decode())
        record(reviewed.request, reviewed.answer)
        return web.Response(body=answer, content_type="application/json")

    app.router.add_post(PATH, handle)


def _too_large() -> web.Response:
    return web.Response(status=413, text=f"the body is over the GPU layout webhook's limit of {BODY_LIMIT} bytes")


async def install_ca_bundle(client: KubeClient, name: str, ca_pem: str) -> bool:
    """Write `ca_pem` as the caBundle of every webhook of MutatingWebhookConfiguration `name` that calls PATH, so
    the apiserver trusts this process's serving certificate. A missing configuration or a refusal is logged, not
    raised: jobs are then laid out by the controller."""
    bundle = base64.b64encode(ca_pem.encode()).decode()
    try:
        configuration = await client.get(CONFIGURATIONS, None, name)
        ours = [i for i, hook in enumerate(configuration.get("webhooks") or [])
                if (((hook.get("clientConfig") or {}).get("service") or {}).get("path")
                    or (hook.get("clientConfig") or {}).get("url") or "").endswith(PATH)]
        if not ours:
            log.warning("the GPU layout webhook's configuration has no webhook calling " + PATH, configuration=name)
            return False
        patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle} for i in ours]
        await client.patch(CONFIGURATIONS, None, name, patch, patch_type="json")
    except (ApiError, OSError) as error:
        api = error if isinstance(error, ApiError) else None
        log.warning("total-GPU jobs are laid out after they are created, not at admission: " + (
            f"MutatingWebhookConfiguration {name} not found (deploy/ installs it)" if api and api.not_found else
            f"could not write the CA of MutatingWebhookConfiguration {name}" + (
                " (its ClusterRole needs get and patch on it: deploy/base/rbac.yaml)" if api and api.forbidden
                else "")),
            error=str(error)[:200])
        return False
    log.info("GPU layout webhook trusts this process's CA", configuration=name, webhooks=len(ours))
    return True
