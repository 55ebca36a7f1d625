"""No single object stops a job silently: refused pods, squatted names, over-large jobs, default tokens.

Each test makes, on the real apiserver (its admission plugins included), one object that could stop a job
without a word, and shows the job says why; the test plays the kubelet.
"""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, SECRETS, SERVICES, ApiError, Resource
from testkit.operator import Cluster, Operator, eventually, mpijob

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


def _templates(manifest: JSON, **spec: Any) -> JSON:
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["spec"].update(spec)
    return manifest


async def _condition(cluster: Cluster, name: str, condition_type: str, status: str = "True") -> JSON | None:
    job = await cluster.job(name)
    for condition in ((job or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == condition_type and condition["status"] == status:
            return dict(condition)
    return None


async def _event(cluster: Cluster, reason: str, text: str) -> str:
    """The Event of that reason whose message holds `text`, once the recorder (in the background) has sent it."""

    async def sent() -> str | None:
        events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
        return next((e["message"] for e in events["items"] if e["reason"] == reason and text in e["message"]), None)

    return await eventually(sent, what=f"a {reason} Event naming {text}")


async def test_a_missing_service_account_is_shown_then_heals(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(_templates(mpijob("sa", workers=1), serviceAccountName="train"))
    failure = await eventually(lambda: _condition(cluster, "sa", "ReplicaFailure"), what="ReplicaFailure")
    assert failure["reason"] == "FailedCreate"
    assert "spec.mpiReplicaSpecs.Worker.template.spec.serviceAccountName" in failure["message"]
    assert 'serviceaccount "train" not found' in failure["message"]
    job = await cluster.job("sa")
    assert job is not None and job["status"]["conditions"][-1]["type"] == "ReplicaFailure"  # the STATE column
    await _event(cluster, "FailedCreate", "serviceAccountName")
    assert await cluster.pods() == {}  # no launcher before its workers

    # The ServiceAccount appears a little later: the job goes on by itself.
    await cluster.kube.create(SERVICEACCOUNTS, cluster.ns, {"metadata": {"name": "train"}})
    wanted = {"sa-launcher", "sa-worker-0"}

    async def pods_made() -> bool:
        return set(await cluster.pods()) == wanted

    await eventually(pods_made, timeout=90, what="pods once the ServiceAccount exists")
    cleared = await eventually(lambda: _condition(cluster, "sa", "ReplicaFailure", "False"), what="cleared")
    assert cleared["reason"] == "ObjectsCreated"
    await cluster.run_all(sorted(wanted))
    await eventually(lambda: cluster.condition("sa", "Running"), what="Running")
    refused = [c for c in operator.requests.calls if c[:2] == ("POST", "pods") and c[2] == 403]
    assert 1 <= len(refused) <= 12  # retried with backoff, not hot-looped


@pytest.mark.parametrize(("spec", "field"), [
    ({"priority": 5}, "priority"),
    ({"overhead": {"cpu": "1"}}, "overhead"),
], ids=["priority-without-class", "overhead-without-runtime-class"])
async def test_a_template_only_the_user_can_fix_fails_the_job(cluster: Cluster, operator: Operator, spec: JSON,
                                                              field: str) -> None:
    await cluster.create_job(_templates(mpijob("fix", workers=1), **spec))
    failed = await eventually(lambda: cluster.condition("fix", "Failed"), what="ValidationError")
    assert failed["reason"] == "ValidationError"
    assert f"spec.mpiReplicaSpecs.Worker.template.spec.{field}" in failed["message"]
    assert "is forbidden" in failed["message"]  # the apiserver's own words
    await operator.settle()
    assert len([c for c in operator.requests.calls if c[:2] == ("POST", "pods") and c[2] == 403]) == 1


async def _squat(cluster: Cluster, job: str, kinds: set[str]) -> None:
    """What a tenant can make before a job of a known name: a key, a hostfile, a Service, a worker pod."""
    labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/operator-name": "mpi-operator"}
    if "Secret" in kinds:
        await cluster.kube.create(SECRETS, cluster.ns, {"metadata": {"name": f"{job}-ssh", "labels": labels},
                                                         "type": "kubernetes.io/ssh-auth",
                                                         "stringData": {"ssh-privatekey": "attacker's"}})
    if "ConfigMap" in kinds:
        await cluster.kube.create(CONFIGMAPS, cluster.ns, {"metadata": {"name": f"{job}-config", "labels": labels},
                                                            "data": {"hostfile": "attacker.example.com slots=64\n"}})
    if "Service" in kinds:
        await cluster.kube.create(SERVICES, cluster.ns, {"metadata": {"name": job, "labels": labels},
                                                          "spec": {"clusterIP": "None", "selector": labels}})
    if "Pod" in kinds:
        await cluster.kube.create(PODS, cluster.ns, {
            "metadata": {"name": f"{job}-worker-0", "labels": {**labels, "training.kubeflow.org/job-role": "worker",
                                                               "training.kubeflow.org/replica-index": "0"}},
            "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}})


async def test_squatted_secret_config_and_service_are_never_used(cluster: Cluster, operator: Operator) -> None:
    await _squat(cluster, "sq", {"Secret", "ConfigMap", "Service"})
    await cluster.create_job(mpijob("sq", workers=1))
    failure = await eventually(lambda: _condition(cluster, "sq", "ReplicaFailure"), what="the conflict shown")
    assert failure["reason"] == "ErrResourceExists"
    for name in ("Secret sq-ssh", "ConfigMap sq-config", "Service sq"):
        assert name in failure["message"]
    await _event(cluster, "ErrResourceExists", "Secret sq-ssh")
    await operator.settle()
    assert await cluster.pods() == {}  # no pod mounts their key or their hostfile

    # The squatters go: the job makes its own objects and starts.
    for resource, name in ((SECRETS, "sq-ssh"), (CONFIGMAPS, "sq-config"), (SERVICES, "sq")):
        await cluster.kube.delete(resource, cluster.ns, name)
    wanted = {"sq-launcher", "sq-worker-0"}

    async def pods_made() -> bool:
        return set(await cluster.pods()) == wanted

    await eventually(pods_made, timeout=90, what="pods once the names are free")
    job = await cluster.job("sq")
    assert job is not None
    secret = await cluster.kube.get(SECRETS, cluster.ns, "sq-ssh")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    config = await cluster.kube.get(CONFIGMAPS, cluster.ns, "sq-config")
    assert "attacker" not in config["data"]["hostfile"]
    await eventually(lambda: _condition(cluster, "sq", "ReplicaFailure", "False"), what="the conflict cleared")


async def test_a_squatted_worker_pod_keeps_the_launcher_from_starting(cluster: Cluster, operator: Operator) -> None:
    await _squat(cluster, "sqp", {"Pod"})
    await cluster.create_job(mpijob("sqp", workers=2))
    failure = await eventually(lambda: _condition(cluster, "sqp", "ReplicaFailure"), what="the conflict shown")
    assert failure["reason"] == "ErrResourceExists" and "Pod sqp-worker-0" in failure["message"]
    await operator.settle()
    assert set(await cluster.pods()) == {"sqp-worker-0", "sqp-worker-1"}  # theirs, and our other worker
    await cluster.kube.delete(PODS, cluster.ns, "sqp-worker-0", grace_period_seconds=0)

    async def launcher_made() -> bool:
        return await cluster.pod("sqp-launcher") is not None

    await eventually(launcher_made, timeout=90, what="the launcher once the name is free")
    worker = await cluster.pod("sqp-worker-0")
    assert worker is not None and worker["metadata"]["ownerReferences"][0]["name"] == "sqp"


async def test_pods_get_no_default_service_account_token(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(mpijob("tok", workers=1))
    wanted = {"tok-launcher", "tok-worker-0"}

    async def pods_made() -> bool:
        return wanted <= set(await cluster.pods())

    await eventually(pods_made, what="pods")
    for pod in (await cluster.pods()).values():
        assert pod["spec"]["automountServiceAccountToken"] is False
        mounts = [m["mountPath"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts") or []]
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts


async def test_more_workers_than_mpiop_is_tested_at_are_refused_at_admission(cluster: Cluster) -> None:
    with pytest.raises(ApiError) as refused:
        await cluster.kube.create(MPIJOBS, cluster.ns, mpijob("huge", workers=10_001))
    assert refused.value.status == 422
    assert "spec.mpiReplicaSpecs.Worker.replicas" in refused.value.message
    assert "10000" in refused.value.message
    await cluster.kube.create(MPIJOBS, cluster.ns, mpijob("largest", workers=10_000))
