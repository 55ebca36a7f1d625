"""The status endpoint against the real apiserver: pod-bound tokens reviewed by TokenReview, a report written
into status.trainerStatus, and every refusal (no token, another job's pod, a wrong audience, an expired token,
a body that does not parse or is out of range) a 4xx saying why, counted, with no status write. And the GPU layout
webhook the process serves beside it.

The operator runs as `mpiop run` (its endpoint on loopback, --status-write-seconds 1). Tokens come from the
apiserver's TokenRequest API bound to the job's pods, as the kubelet's projected volume gets them (no kubelet
runs here); the expired one is signed with the apiserver's own service-account key.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from pathlib import Path

import aiohttp
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import TrainerStatus
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, KubeClient
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.policies.gpu_layout import AT_ADMISSION
from mpiop.serving import layout_webhook
from mpiop.serving.status_endpoint import StatusWriter
from testkit.gpupool import gpu_pool, total_gpus_job
from testkit.layout_webhook import configuration
from testkit.metrics import Metrics
from testkit.nodes import gpu_nodes
from testkit.operator import Cluster, eventually, mpijob
from testkit.pods import env_of
from testkit.process import OperatorProcess
from testkit.progress_posts import client_context, post
from testkit.rbac import pod_token

AUDIENCE = "mpiop.kubeflow.org"
REPORT = {"progressPercentage": 40, "estimatedRemainingSeconds": 95, "metrics": [{"name": "loss", "value": "0.31"}]}


async def _token(cluster: Cluster, pod: str, audience: str = AUDIENCE) -> str:
    return await pod_token(cluster.kube, cluster.ns, await cluster.pod(pod) or {}, audience)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _expired_token(control_plane: ControlPlane, namespace: str, pod: JSON) -> str:
    """A pod-bound token of the right audience, signed by the apiserver's key, that expired an hour ago."""
    key = serialization.load_pem_private_key((control_plane.pki / "sa.key").read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    now = int(time.time())
    claims = {"aud": [AUDIENCE], "iss": "https://kubernetes.default.svc", "iat": now - 7200, "nbf": now - 7200,
              "exp": now - 3600, "sub": f"system:serviceaccount:{namespace}:default",
              "kubernetes.io": {"namespace": namespace, "pod": {"name": pod["metadata"]["name"],
                                                                "uid": pod["metadata"]["uid"]},
                                "serviceaccount": {"name": "default", "uid": "00000000-0000-0000-0000-000000000000"}}}
    signing = f"{_b64(json.dumps({'alg': 'RS256', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing}.{_b64(signature)}"


async def _post(url: str, ca: str, token: str | None, body: bytes) -> tuple[int, JSON]:
    async with aiohttp.ClientSession() as session:
        code, answer, _ = await post(session, url, token, body, client_context(ca))
        return code, answer


async def test_only_the_jobs_own_pods_write_its_progress(control_plane: ControlPlane, cluster: Cluster,
                                                         tmp_path: Path) -> None:
    op = OperatorProcess.in_namespace(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path,
                                      "--status-write-seconds=1")
    try:
        await eventually(op.ready, timeout=60, what="/readyz")
        await cluster.create_job(mpijob("pa", workers=1))
        await cluster.create_job(mpijob("pb", workers=1))

        async def pods_made() -> bool:
            return {"pa-worker-0", "pa-launcher", "pb-worker-0"} <= set(await cluster.pods())

        await eventually(pods_made, what="both jobs' pods")
        pods = await cluster.pods()
        ca = (await cluster.kube.get(CONFIGMAPS, cluster.ns, "pa-config"))["data"]["mpiop-status-ca.crt"]
        worker = pods["pa-worker-0"]["spec"]
        env = env_of(worker["containers"][0])
        url = f"{op.status_url}/apis/kubeflow.org/v2beta1/namespaces/{cluster.ns}/mpijobs/pa/status"
        assert env["MPIOP_STATUS_URL"] == url
        assert env["MPIOP_STATUS_TOKEN"] == "/var/run/secrets/mpiop.kubeflow.org/status/token"
        volume = next(v for v in worker["volumes"] if v["name"] == "mpiop-status")
        assert volume["projected"]["sources"][0]["serviceAccountToken"]["audience"] == AUDIENCE

        before = await op.metrics()
        body = json.dumps({"trainerStatus": REPORT}).encode()
        other_job = await _token(cluster, "pb-worker-0")
        refusals = [
            (None, body, 401, "no_token"),
            (other_job, body, 403, "other_job"),
            (await _token(cluster, "pa-worker-0", audience="https://kubernetes.default.svc"), body, 401,
             "unauthenticated"),
            (_expired_token(control_plane, cluster.ns, pods["pa-worker-0"]), body, 401, "unauthenticated"),
            (await _token(cluster, "pa-launcher"), b"{not json", 400, "bad_body"),
            (await _token(cluster, "pa-launcher"), json.dumps({"trainerStatus": {"progressPercentage": 150}}).encode(),
             422, "out_of_range"),
        ]
        for token, sent, code, reason in refusals:
            answer = await _post(url, ca, token, sent)
            print(code, reason, answer[1].get("message"))
            assert answer[0] == code and answer[1]["reason"] == reason, answer
        assert "trainerStatus.progressPercentage: Input should be less than or equal to 100" in answer[1]["message"]
        # The job's own pod: accepted, written within the interval.
        assert (await _post(url, ca, await _token(cluster, "pa-worker-0"), body))[0] == 202

        async def written() -> JSON | None:
            job = await cluster.job("pa")
            return ((job or {}).get("status") or {}).get("trainerStatus")

        report = await eventually(written, what="status.trainerStatus written")
        assert {k: report[k] for k in REPORT} == REPORT and report["lastUpdatedTime"]

        async def in_the_gauges() -> Metrics | None:
            """The gauges are read off the operator's cache, which holds the write once its watch event arrives: the
            apiserver may answer the read above first."""
            scraped = await op.metrics()
            return scraped if scraped.value("mpiop_mpijob_progress_ratio", namespace=cluster.ns, name="pa") else None

        after = await eventually(in_the_gauges, what="the report in the operator's gauges")
        for _, _, code, reason in refusals:
            assert after.value("mpiop_status_posts_total", code=str(code), reason=reason) - before.value(
                "mpiop_status_posts_total", code=str(code), reason=reason) >= 1, (code, reason)
        assert after.value("mpiop_status_posts_total", code="202", reason="accepted") == 1
        refused_job = await cluster.job("pb")
        assert "trainerStatus" not in (refused_job or {}).get("status", {}), "a refused post writes nothing"
        assert after.value("mpiop_mpijob_progress_ratio", namespace=cluster.ns, name="pa") == 0.4
        assert after.value("mpiop_mpijob_estimated_remaining_seconds", namespace=cluster.ns, name="pa") == 95
    finally:
        op.stop()


async def test_posts_are_coalesced_into_one_write_per_interval(control_plane: ControlPlane, cluster: Cluster) -> None:
    """Fifty reports in a burst, then ten more a second later: two writes of the job's status, the last report
    of each burst, through the real apiserver (no operator: the writer alone, counting its requests)."""
    await cluster.create_job(mpijob("co", workers=1))
    writes: list[tuple[str, str]] = []
    client = await KubeClient.connect(str(control_plane.kubeconfig),
                                      on_request=lambda method, path, query: writes.append((method, path)))
    writer = StatusWriter(client, interval=1.0)
    try:
        now = dt.datetime.now(dt.UTC)
        for percent in range(50):
            writer.offer(cluster.ns, "co", TrainerStatus(progress_percentage=percent, last_updated_time=now))

        async def shows(percent: int) -> bool:
            job = await cluster.job("co") or {}
            return ((job.get("status") or {}).get("trainerStatus") or {}).get("progressPercentage") == percent

        await eventually(lambda: shows(49), what="the burst's last report")
        for percent in range(50, 60):
            writer.offer(cluster.ns, "co", TrainerStatus(progress_percentage=percent, estimated_remaining_seconds=9))
        await eventually(lambda: shows(59), what="the second burst's last report")
        job = await cluster.job("co") or {}
        assert job["status"]["trainerStatus"]["estimatedRemainingSeconds"] == 9
        assert writes == [("PATCH", f"/apis/kubeflow.org/v2beta1/namespaces/{cluster.ns}/mpijobs/co/status")] * 2
    finally:
        await writer.close()
        await client.close()


async def test_mpiop_run_serves_the_gpu_layout_webhook_beside_its_endpoint(control_plane: ControlPlane,
                                                                          cluster: Cluster, tmp_path: Path) -> None:
    """The process wiring: `mpiop run` serves the webhook on its status endpoint's address and certificate, and writes
    its CA into the configuration --gpu-layout-webhook names; the apiserver then lays a total-GPU job out as it is
    created, from the process's own Node informer."""
    name = f"{cluster.ns}-gpu-layout"
    op = OperatorProcess(control_plane.kubeconfig, tmp_path / "mpiop.log",
                         [f"--namespace={cluster.ns}", f"--gpu-layout-webhook={name}"])
    async with gpu_pool(cluster.kube, lambda pool, labels: gpu_nodes(f"{pool}-eight", 2, 8, labels=labels)) as pool:
        await cluster.kube.create(layout_webhook.CONFIGURATIONS, None, configuration(name, op.status_url, cluster.ns))
        op.start()
        try:
            async def laid_out_at_admission() -> bool:
                answer = await cluster.kube.request("POST", MPIJOBS.path(cluster.ns), query={"dryRun": "All"},
                                                    body=total_gpus_job("probe", pool, 16))
                return GPU_LAYOUT_ANNOTATION in (answer["metadata"].get("annotations") or {})

            await eventually(laid_out_at_admission, timeout=60, what="the webhook in effect")
            created = await cluster.create_job(total_gpus_job("big", pool, 16))
            print(f"\n{GPU_LAYOUT_ANNOTATION}: {created['metadata']['annotations'][GPU_LAYOUT_ANNOTATION]}")
            assert created["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION].endswith(AT_ADMISSION)
            assert created["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
            assert any(line.get("event") == "GPU layout webhook trusts this process's CA" for line in op.json_log())
            assert (await op.metrics()).value("mpiop_gpu_layout_admissions_total", result="laid_out") >= 2
        finally:
            op.stop()
            await cluster.kube.delete(layout_webhook.CONFIGURATIONS, None, name)
