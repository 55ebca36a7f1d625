"""mpiop.serving.layout_webhook: a total-GPU job is laid out in the request that creates it (a JSON patch in the
AdmissionReview), so it is stored laid out; the webhook never refuses, and says in a warning why it laid nothing
out. The apiserver applying the patch is tests/integration/test_gpu_layout.py's."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from devcluster.certs import CertificateAuthority, KeyPair
from devcluster.controlplane import free_port
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.certs import Certificates
from mpiop.decide import decide
from mpiop.desired.settings import Settings
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.plan import Observed
from mpiop.policies.gpu_layout import AT_ADMISSION, LAID_OUT, needs_layout
from mpiop.server import Servers, trust_clients
from mpiop.serving import layout_webhook
from mpiop.serving.layout_webhook import BODY_LIMIT, PATH, WebhookLimits, malformed, review
from testkit.mpijobs import at, make_mpijob
from testkit.nodes import gpu_node, gpu_nodes, taint

EIGHTS = gpu_nodes("n", 10, 8)
LIMIT = Settings().gpu_layout_max_entries


def admission(obj: JSON, operation: str = "CREATE") -> JSON:
    """An AdmissionReview as the apiserver sends it for deploy/base/webhook.yaml's rule."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": operation, "namespace": "ns",
                        "kind": {"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"},
                        "resource": {"group": "kubeflow.org", "version": "v2beta1", "resource": "mpijobs"},
                        "object": obj}}


def patched(answer: JSON) -> list[JSON]:
    response = answer["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == (
        "705ab4f5-6393-11e8-b7cc-42010a800002", True, "JSONPatch")
    return list(json.loads(base64.b64decode(response["patch"])))


def apply(obj: JSON, patch: list[JSON]) -> JSON:
    """The two operations the webhook sends, as the apiserver applies them."""
    result: JSON = json.loads(json.dumps(obj))
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = result
        for part in parents:
            target = target[part]
        target[last] = op["value"]
    return result


def test_64_gpus_are_stored_as_8_workers_of_8_with_the_record() -> None:
    job = make_mpijob("big", "ns").total_gpus(64).manifest()
    answer = review(admission(job), EIGHTS, LIMIT).admission
    assert "warnings" not in answer["response"]
    laid_out = apply(job, patched(answer))
    record = laid_out["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION]
    assert record == ("64 nvidia.com/gpu as 8 workers x 8 GPUs (slotsPerWorker 8), on nodes: 10 nodes with 8 "
                      "nvidia.com/gpu" + AT_ADMISSION)
    worker = laid_out["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 8 and laid_out["spec"]["slotsPerWorker"] == 8
    assert worker["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert laid_out["spec"]["gpus"] == 64  # the request stays beside its layout
    # Everything else is as written, and the controller sees an ordinary job.
    assert laid_out["spec"]["mpiReplicaSpecs"]["Launcher"] == job["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert not needs_layout(MPIJob.model_validate(laid_out))


def test_the_record_is_added_beside_other_annotations() -> None:
    job = make_mpijob("big", "ns").total_gpus(8).annotation("team", "vision").json()
    patch = patched(review(admission(job), EIGHTS, LIMIT).admission)
    assert patch[1] == {"op": "add", "path": "/metadata/annotations/mpiop.kubeflow.org~1gpu-layout",
                        "value": "8 nvidia.com/gpu as 1 worker x 8 GPUs (slotsPerWorker 8), on nodes: 10 nodes with "
                                 "8 nvidia.com/gpu" + AT_ADMISSION}
    assert apply(job, patch)["metadata"]["annotations"]["team"] == "vision"


@pytest.mark.parametrize(("obj", "operation", "nodes", "warning"), [
    pytest.param(make_mpijob("plain", "ns").gpus(8).manifest(), "CREATE", EIGHTS, None, id="v2beta1-job-untouched"),
    pytest.param(make_mpijob("laid", "ns").total_gpus(16).gpus(8).workers(2).manifest(), "CREATE", EIGHTS, None,
                 id="laid-out-already"),
    pytest.param(make_mpijob("big", "ns").total_gpus(64).manifest(), "UPDATE", EIGHTS, None, id="update"),
    pytest.param(make_mpijob("big", "ns").total_gpus(64).manifest(), "CREATE", None,
                 "spec.gpus: mpiop does not watch nodes yet; it lays the job out once it does", id="nodes-not-synced"),
    pytest.param(make_mpijob("odd", "ns").total_gpus(13).manifest(), "CREATE", EIGHTS,
                 "spec.gpus: the job waits until a layout fits (its Running condition says why)", id="none-fits"),
    pytest.param(make_mpijob("long", "ns").total_gpus(8).pod_spec("Worker", tolerations=[{}] * 20_000).manifest(),
                 "CREATE", EIGHTS,
                 "spec.gpus: mpiop does not lay this job out: spec.mpiReplicaSpecs.Worker.template.spec.tolerations: "
                 f"20000 entries, over the GPU layout's limit of {LIMIT} (the operator's --gpu-layout-max-entries)",
                 id="over-the-limit"),
])
def test_allowed_unchanged(obj: JSON, operation: str, nodes: list[JSON] | None, warning: str | None) -> None:
    response = review(admission(obj, operation), nodes, LIMIT).admission["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response.get("warnings") == ([warning] if warning else None)


def test_the_warning_names_no_node_label_or_taint_value_nor_counts_them() -> None:
    """Anyone who reaches the webhook reads the warning, and may not read nodes: it says neither which nodes a
    template leaves out nor how many (the job's Running condition, which only who may read the job reads, does)."""
    secret = [gpu_node("rack7-secret-0", 8, labels={"customer": "acme-corp"}),
              gpu_node("rack7-secret-1", 8, taints=[taint("customer", "acme-corp")]),
              gpu_node("rack7-secret-2", 4, unschedulable=True)]
    reviewed = review(admission(make_mpijob("odd", "ns").total_gpus(24).manifest()), secret, LIMIT)
    response = reviewed.admission["response"]
    [warning] = response["warnings"]
    assert warning == "spec.gpus: the job waits until a layout fits (its Running condition says why)"
    assert not [word for word in ("rack7", "secret", "customer", "acme") if word in warning], warning


def test_the_first_pass_of_a_job_laid_out_at_admission_says_so_in_an_event() -> None:
    job = make_mpijob("big", "ns").total_gpus(64).manifest()
    stored = MPIJob.model_validate(apply(job, patched(review(admission(job), EIGHTS, LIMIT).admission)))
    first = decide(stored, Observed(nodes=EIGHTS), at(0))
    assert first.mpijob_patch is None and len(first.creation_steps.workers) == 8
    laid_out = [e.message for e in first.events if e.reason == LAID_OUT]
    assert laid_out == [f"laid out {stored.metadata.annotations[GPU_LAYOUT_ANNOTATION]}"]
    again = MPIJob.model_validate({**stored.to_json(), "status": first.status.to_json()})
    assert not [e for e in decide(again, Observed(nodes=EIGHTS), at(1)).events
                if e.reason == LAID_OUT]


GOOD = admission(make_mpijob("big", "ns").total_gpus(16).manifest())
OTHER_KIND = {**GOOD, "request": {**GOOD["request"], "kind": {"group": "", "version": "v1", "kind": "Pod"}}}


@pytest.mark.parametrize(("body", "why"), [
    pytest.param([GOOD], "the body is not an admission.k8s.io/v1 AdmissionReview", id="a-list"),
    pytest.param({**GOOD, "apiVersion": "admission.k8s.io/v1beta1"},
                 "the body is not an admission.k8s.io/v1 AdmissionReview", id="v1beta1"),
    pytest.param({**GOOD, "kind": "TokenReview"}, "the body is not an admission.k8s.io/v1 AdmissionReview",
                 id="other-kind-of-review"),
    pytest.param({k: v for k, v in GOOD.items() if k != "request"}, "the AdmissionReview has no request with a uid",
                 id="no-request"),
    pytest.param({**GOOD, "request": {**GOOD["request"], "uid": ""}}, "the AdmissionReview has no request with a uid",
                 id="empty-uid"),
    pytest.param(OTHER_KIND, "this webhook answers only for kubeflow.org/v2beta1 MPIJobs, not /v1/Pod", id="a-pod"),
    pytest.param({**GOOD, "request": {**GOOD["request"], "kind": "MPIJob"}},
                 "this webhook answers only for kubeflow.org/v2beta1 MPIJobs, not a request without a kind",
                 id="kind-not-an-object"),
    pytest.param({**GOOD, "request": {k: v for k, v in GOOD["request"].items() if k != "operation"}},
                 "the AdmissionReview's request has no operation", id="no-operation"),
    pytest.param({**GOOD, "request": {k: v for k, v in GOOD["request"].items() if k != "object"}},
                 "the AdmissionReview creates no object", id="create-without-object"),
    pytest.param(GOOD, None, id="well-formed"),
])
def test_only_a_well_formed_review_of_an_mpijob_is_answered(body: object, why: str | None) -> None:
    assert malformed(body) == why


async def test_served_over_http_a_bad_body_is_a_400_and_a_long_job_is_read_up_to_the_limit() -> None:
    """Served on the status endpoint's app, whose own body limit is 64 KiB: a job with a long template (here 1 MiB,
    as etcd stores up to 1.5) is still laid out; a body over BODY_LIMIT is a 413 naming it."""
    app = web.Application(client_max_size=64 * 1024)
    layout_webhook.add_route(app, lambda: EIGHTS, LIMIT)
    env = [{"name": f"VAR_{i}", "value": "x" * 100} for i in range(8_000)]  # ~1 MiB, within every limit of entries
    long = admission(make_mpijob("long", "ns").total_gpus(16).pod_spec("Worker", env=env).manifest())
    async with TestClient(TestServer(app)) as client:
        good = await client.post(PATH, json=GOOD)
        assert good.status == 200
        assert patched(await good.json())[0]["value"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        answered = await client.post(PATH, data=json.dumps(long))
        assert answered.status == 200, await answered.text()
        assert patched(await answered.json())[0]["value"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        bad = await client.post(PATH, data=b"{not json")
        assert bad.status == 400 and "not an AdmissionReview" in await bad.text()
        pod = await client.post(PATH, json=OTHER_KIND)
        assert (pod.status, await pod.text()) == (400, "this webhook answers only for kubeflow.org/v2beta1 MPIJobs, "
                                                       "not /v1/Pod")
        huge = await client.post(PATH, data=b" " * (BODY_LIMIT + 1))
        assert (huge.status, await huge.text()) == (
            413, f"the body is over the GPU layout webhook's limit of {BODY_LIMIT} bytes")

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds as it is read
            for _ in range(4):
                yield b" " * (1024 * 1024)

        streamed = await client.post(PATH, data=chunks())
        assert streamed.status == 413


ANSWERED = [  # (the job, the nodes watched, the result counted)
    (make_mpijob("big", "ns").total_gpus(16).manifest(), EIGHTS, "laid_out"),
    (make_mpijob("odd", "ns").total_gpus(13).manifest(), EIGHTS, "no_fit"),
    (make_mpijob("early", "ns").total_gpus(8).manifest(), None, "no_nodes"),
    (make_mpijob("long", "ns").total_gpus(8).pod_spec("Worker", tolerations=[{}] * (LIMIT + 1)).manifest(), EIGHTS,
     "over_limit"),
    (make_mpijob("plain", "ns").gpus(8).manifest(), EIGHTS, None),  # not one to lay out: not counted
]


def counted() -> dict[str, float]:
    return {result: REGISTRY.get_sample_value("mpiop_gpu_layout_admissions_total", {"result": result}) or 0.0
            for result in ("laid_out", "no_fit", "no_nodes", "over_limit")}


def test_review_is_pure_it_returns_the_result_and_counts_nothing() -> None:
    before = counted()
    assert [review(admission(job), nodes, LIMIT).answer.result for job, nodes, _ in ANSWERED] == [
        result for _, _, result in ANSWERED]
    assert counted() == before


@pytest.mark.parametrize(("job", "nodes", "result"), ANSWERED, ids=[r or "not-counted" for _, _, r in ANSWERED])
async def test_served_each_answer_is_counted_by_its_result(job: JSON, nodes: list[JSON] | None,
                                                            result: str | None) -> None:
    app = web.Application()
    layout_webhook.add_route(app, lambda: nodes, LIMIT)
    before = counted()
    async with TestClient(TestServer(app)) as client:
        assert (await client.post(PATH, json=admission(job))).status == 200
    assert {r: n - before[r] for r, n in counted().items() if n != before[r]} == ({result: 1} if result else {})


async def test_a_source_past_its_budget_is_a_429_naming_the_flags_with_retry_after() -> None:
    now = [0.0]
    app = web.Application()
    layout_webhook.add_route(app, lambda: EIGHTS, LIMIT, limits=WebhookLimits(per_source_qps=0.5, per_source_burst=2),
                             clock=lambda: now[0])
    async with TestClient(TestServer(app)) as client:
        assert [(await client.post(PATH, json=GOOD)).status for _ in range(2)] == [200, 200]
        over = await client.post(PATH, json=GOOD)
        assert (over.status, over.headers["Retry-After"]) == (429, "2")
        assert "(--gpu-layout-per-source-burst, --gpu-layout-per-source-qps)" in (await over.json())["message"]
        now[0] = 2.0  # one review's worth refilled
        assert (await client.post(PATH, json=GOOD)).status == 200


async def test_the_layout_runs_off_the_event_loop_one_review_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop renews the leader's Lease: a layout of many nodes must not stall it."""
    threads: list[bool] = []
    running, most = [0], [0]
    laid_out = layout_webhook.review

    def watched(*args: Any) -> layout_webhook.Reviewed:
        threads.append(threading.current_thread() is threading.main_thread())
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            return laid_out(*args)
        finally:
            running[0] -= 1

    monkeypatch.setattr(layout_webhook, "review", watched)
    app = web.Application()
    layout_webhook.add_route(app, lambda: EIGHTS, LIMIT)
    async with TestClient(TestServer(app)) as client:
        answers = await asyncio.gather(*(client.post(PATH, json=GOOD) for _ in range(6)))
        assert [a.status for a in answers] == [200] * 6
    assert threads == [False] * 6 and most == [layout_webhook.LAYOUTS_AT_ONCE]


def test_a_name_that_does_not_parse_is_logged_cut_and_escaped() -> None:
    job = {**make_mpijob("x", "ns").total_gpus(8).manifest(), "spec": "not a spec"}
    job["metadata"] = {"name": "\x1b]0;pwned\x07" + "n" * 10_000}
    reviewed = review(admission(job), EIGHTS, LIMIT)
    assert reviewed.answer.result == "unparsed"
    with structlog.testing.capture_logs() as logs:
        layout_webhook.record(reviewed.request, reviewed.answer)
    [logged] = [entry["job"] for entry in logs if entry["event"] == "admission: total-GPU job"]
    assert "\x1b" not in logged and "\x07" not in logged and "\\x1b]0;pwned\\x07" in logged
    assert logged.startswith("ns/\\x1b]0;pwned\\x07nnn") and logged.endswith("n")
    assert len(logged) == layout_webhook.LOGGED_NAME_LIMIT + 6  # two escapes of 4 characters each


async def test_with_a_client_ca_only_a_verified_client_is_answered_and_told_why_no_layout_fits(
        tmp_path: Path) -> None:
    """--gpu-layout-client-ca: the server asks for a client certificate (the pods' posts, without one, still connect);
    the webhook answers only a client whose certificate that CA signed, and tells it (the apiserver, which hands
    the warning to the job's creator) how many nodes the template leaves out."""
    clients, strangers = CertificateAuthority(tmp_path / "clients"), CertificateAuthority(tmp_path / "strangers")
    apiserver = clients.issue("apiserver", common_name="kube-apiserver")
    stranger = strangers.issue("stranger", common_name="kube-apiserver")
    certificates = Certificates(["127.0.0.1"])
    trust_clients(certificates.context, str(clients.pair.cert))
    app = web.Application()
    layout_webhook.add_route(app, lambda: EIGHTS, LIMIT, verified_clients_only=True)
    servers, port = Servers(), free_port()
    await servers.start(app, f"127.0.0.1:{port}", "test", ssl_context=certificates.context)

    def context(pair: KeyPair | None) -> ssl.SSLContext:
        made = ssl.create_default_context(cadata=certificates.ca_pem)
        if pair is not None:
            made.load_cert_chain(pair.cert, pair.key)
        return made

    odd = admission(make_mpijob("odd", "ns").total_gpus(13).manifest())
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{port}{PATH}", json=odd, ssl=context(apiserver)) as answer:
                [warning] = (await answer.json())["response"]["warnings"]
                assert answer.status == 200 and warning.startswith(
                    "spec.gpus: the job waits until a layout fits (its Running condition says why): no layout of 13 "
                    "nvidia.com/gpu fits the nodes the Worker template may run on (10 nodes with 8 nvidia.com/gpu)")
            async with session.post(f"https://127.0.0.1:{port}{PATH}", json=odd, ssl=context(None)) as answer:
                assert (answer.status, (await answer.json())["reason"]) == (403, "unauthenticated")
            with pytest.raises(aiohttp.ClientError):  # a certificate the CA did not sign: no handshake
                async with session.post(f"https://127.0.0.1:{port}{PATH}", json=odd, ssl=context(stranger)):
                    pass
    finally:
        await servers.stop()
