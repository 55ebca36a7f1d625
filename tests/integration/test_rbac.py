"""deploy/'s RBAC is sufficient and minimal, shown with the real apiserver's authorizer.

The ServiceAccount, ClusterRole(+Binding) and leader-election Role(+Binding) are applied from deploy/base; a token
is minted for the ServiceAccount (TokenRequest) and the operator runs in-process on that token alone, leader
election included, through a whole job life: creation, suspended and resumed twice as Kueue would (the second
Suspended Event bumps the first one's count), two failed attempts (whose launchers' logs are read for the failure
report and saved, the second's ConfigMap replacing the first's under --kept-attempts 1; the first launcher's node
is gone, so it is read and excluded) and restarts, a progress token reviewed as the status endpoint does (and the
operator's own pod labelled for the status Service, cleared as it starts, set once it leads; its CA made in, read
from and renewed in Secret mpiop-status-ca, and written into the GPU layout webhook's configuration), Running,
success, clean-up of the workers, deletion by ttlSecondsAfterFinished, and the lease's release at shutdown; beside
it, a job kubeflow's operator left with a failed worker is taken over and restarted (its objects claimed, its
launcher Job deleted), and a job stating its total GPUs is laid out on a GPU node (the Node informer's list and
watch, the job's patch), another through DRA from the node's ResourceSlice (their informers', and DeviceClasses',
list and watch; its ResourceClaimTemplate's creation), and a worker evicted for a DRA device's taint has the
namespace's ResourceClaims read to name the device. Every request it sends is recorded as the (verb, group,
resource, name) the authorizer sees and compared with the rules both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.certs import CA_DAYS
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.desired.settings import Settings
from mpiop.kube.client import (
    BATCH_JOBS,
    DEVICE_CLASSES,
    MPIJOBS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    SECRETS,
    ApiError,
    KubeClient,
)
from mpiop.leader import LEASES, ElectionConfig, LeaderElector
from mpiop.names import STATUS_ENDPOINT_LABEL, STATUS_ENDPOINT_SERVING
from mpiop.process import supervise
from mpiop.serving import layout_webhook, status_ca
from mpiop.serving.status_endpoint import OwnPod, Reviewer, TokenReviews
from testkit import kubeflow
from testkit.deploy import DEPLOY, SYSTEM
from testkit.dra import device_class, resource_slice
from testkit.layout_webhook import configuration
from testkit.mpijobs import make_mpijob
from testkit.namespaces import create_namespace, delete_namespace
from testkit.nodes import gpu_node
from testkit.operator import Cluster, drive_to_success, eventually, mpijob
from testkit.rbac import Request, allows, applied, pod_token, recorder, rules, service_account_kubeconfig

LEASE = "mpiop"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# Granted for an admission plugin, not for a request: OwnerReferencesPermissionEnforcement (off in this
# apiserver, on in OpenShift and some hardened clusters) lets only users who may update an owner's
# finalizers set blockOwnerDeletion on the objects they create, which mpiop does.
ADMISSION_ONLY = {("update", "kubeflow.org", "mpijobs/finalizers")}
GONE_NODE = "rbac-gone-node"
GPU_NODE = "rbac-gpu-node"  # a job stating its total GPUs is laid out on it (nodes list/watch, mpijobs patch)
DRA_CLASS = "gpu.rbac.example.com"  # its DeviceClass and driver: a ResourceSlice of 8 devices on GPU_NODE
WEBHOOK = "mpiop-gpu-layout"  # deploy/base/webhook.yaml's (for the test's namespace only: the apiserver is shared)
OWN_POD = "mpiop-rbac-own"  # the operator's own pod, labelled for the status Service (pods patch in its namespace)
STATUS_CA = status_ca.SecretRef(SYSTEM, "mpiop-status-ca")  # deploy/base/deployment.yaml's --status-ca-secret


@dataclass
class Run:
    requests: list[Request] = field(default_factory=list)
    codes: list[tuple[str, str, int]] = field(default_factory=list)
    exit_code: int | None = None
    lease_after: JSON = field(default_factory=dict)


@pytest.fixture(scope="module")
async def rbac_objects(control_plane: ControlPlane) -> AsyncIterator[list[JSON]]:
    """deploy/base's ServiceAccount and roles, applied for real (and removed afterwards)."""
    with applied(control_plane, DEPLOY / "base", RBAC_KINDS) as objects:
        yield objects


@pytest.fixture(scope="module")
async def token_kubeconfig(control_plane: ControlPlane, kube: KubeClient, rbac_objects: list[JSON],
                           tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kubeconfig holding only a fresh token of the ServiceAccount and the cluster's CA."""
    return await service_account_kubeconfig(control_plane, kube, tmp_path_factory.mktemp("sa") / "kubeconfig")


async def fail_attempt(cluster: Cluster, name: str, attempt: int = 0) -> str:
    """Fail the attempt's launcher (its log is read for the failure report and saved: `pods/log get`); the next
    attempt's launcher."""
    launcher = f"{name}-launcher-{attempt}" if attempt else f"{name}-launcher"
    await eventually(lambda: cluster.pod(launcher), what=f"{launcher}")
    if attempt == 0:  # on a node that is gone: read when the attempt fails (`nodes get`), then excluded
        await cluster.bind(launcher, GONE_NODE)
    await cluster.set_phase(launcher, "Failed", exit_code=1)

    async def restarted() -> bool:
        return ((await cluster.job(name) or {}).get("status") or {}).get("restartCount") == attempt + 1

    await eventually(restarted, what=f"{name} restarted after attempt {attempt + 1}")
    if attempt == 0:
        assert ((await cluster.job(name) or {}).get("status") or {}).get("excludedNodes") == [GONE_NODE]
    return f"{name}-launcher-{attempt + 1}"


async def evict_for_a_device_taint(cluster: Cluster, name: str) -> None:
    """Its worker on GPU_NODE marked as the device taint manager evicts a pod: the attempt is a disruption, and to
    name the device mpiop lists the namespace's ResourceClaims and the node's ResourceSlices (`resourceclaims
    list`); the node is excluded."""
    worker = f"{name}-worker-0"
    await eventually(lambda: cluster.pod(worker), what=worker)
    await cluster.bind(worker, GPU_NODE)
    await cluster.kube.patch(PODS, cluster.ns, worker, {"status": {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByDeviceTaintManager",
         "message": "Device Taint manager: deleting due to NoExecute taint"}]}}, subresource="status")

    async def restarted() -> JSON | None:
        status = ((await cluster.job(name)) or {}).get("status") or {}
        return status if status.get("restartCount") == 1 else None

    status = await eventually(restarted, what=f"{name} restarted after its worker's eviction")
    assert (status.get("excludedNodes"), status.get("disruptionRestarts")) == ([GPU_NODE], 1), status


async def review_a_pods_token(cluster: Cluster, client: KubeClient, name: str) -> None:
    """The status endpoint's one request (`tokenreviews create`): a TokenReview of a pod's progress token."""
    pod = await eventually(lambda: cluster.pod(f"{name}-worker-0"), what=f"{name}-worker-0")
    who = await TokenReviews(client).review(await pod_token(cluster.kube, cluster.ns, pod), "127.0.0.1")
    assert isinstance(who, Reviewer), who
    assert (who.namespace, who.pod_name) == (cluster.ns, f"{name}-worker-0")


async def suspend_and_resume(cluster: Cluster, name: str) -> None:
    """Suspend a job whose pods exist (they go), then resume it."""
    wanted = {f"{name}-launcher", f"{name}-worker-0"}

    async def pods_are(expected: set[str]) -> bool:
        return {p for p in await cluster.pods() if p.startswith(f"{name}-")} == expected

    await eventually(lambda: pods_are(wanted), what=f"pods of {name}")
    await cluster.kube.patch(MPIJOBS, cluster.ns, name, {"spec": {"runPolicy": {"suspend": True}}})
    await eventually(lambda: pods_are(set()), what=f"{name}'s pods deleted while suspended")
    await cluster.kube.patch(MPIJOBS, cluster.ns, name, {"spec": {"runPolicy": {"suspend": False}}})


@pytest.fixture(scope="module")
async def lifecycle(kube: KubeClient, token_kubeconfig: str, mpijob_crd: None) -> AsyncIterator[Run]:
    """One job's whole life, the operator holding nothing but the ServiceAccount's token."""
    namespace = f"t-rbac-{uuid.uuid4().hex[:6]}"
    await create_namespace(kube, namespace)
    with contextlib.suppress(ApiError):
        await kube.create(NODES, None, gpu_node(GPU_NODE, 8))
    with contextlib.suppress(ApiError):
        await kube.create(DEVICE_CLASSES, None, device_class(DRA_CLASS))
    with contextlib.suppress(ApiError):
        await kube.create(RESOURCE_SLICES, None, resource_slice(GPU_NODE, DRA_CLASS, 8))
    with contextlib.suppress(ApiError):
        await kube.delete(LEASES, SYSTEM, LEASE)  # so the run also creates it
    run = Run()
    def recording(**options: Any) -> Awaitable[KubeClient]:
        return KubeClient.connect(token_kubeconfig, qps=0, burst=1000, on_request=recorder(run.requests),
                                  observer=lambda v, r, c, s: run.codes.append((v, r, c)), **options)

    lease_client = await recording()
    elector = LeaderElector(lease_client, ElectionConfig(
        namespace=SYSTEM, name=LEASE, identity=f"rbac-{uuid.uuid4().hex[:6]}",
        lease_duration=15, renew_deadline=10, retry_period=2))  # the lease is free: taken at once
    main = await recording(write_guard=elector.guard_write)
    clients = [main, lease_client]
    with contextlib.suppress(ApiError):
        await kube.delete(PODS, SYSTEM, OWN_POD, grace_period_seconds=0)
    with contextlib.suppress(ApiError):
        await kube.delete(SECRETS, SYSTEM, STATUS_CA.name)  # so the run also creates it
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}  # the namespace enforces Pod Security "restricted"
    await kube.create(PODS, SYSTEM, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": OWN_POD}, "spec": {
        "serviceAccountName": "mpiop",
        "containers": [{"name": "mpiop", "image": "mpiop", "securityContext": restricted}]}})
    own_pod = OwnPod(SYSTEM, OWN_POD)
    with contextlib.suppress(ApiError):
        await kube.delete(layout_webhook.CONFIGURATIONS, None, WEBHOOK)
    await kube.create(layout_webhook.CONFIGURATIONS, None, configuration(WEBHOOK, "https://127.0.0.1:9", namespace))
    try:
        # The status endpoint's CA, as each process reads it at start (on the unguarded client): made, read, renewed.
        now = dt.datetime.now(dt.UTC)
        ca, made = await status_ca.shared_ca(lease_client, STATUS_CA, now)
        assert (made, (await status_ca.shared_ca(lease_client, STATUS_CA, now))[1]) == ("created", "loaded")
        ca, renewed = await status_ca.shared_ca(lease_client, STATUS_CA, now + dt.timedelta(days=CA_DAYS))
        assert renewed == "renewed"
        assert await own_pod.mark(lease_client, serving=False), "the pod's label cleared as the process starts"
        cluster = Cluster(kube, namespace)
        await eventually(lambda: cluster.kube.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
                         what="the namespace's default ServiceAccount")
        await kubeflow.recreate(kube, namespace, "kf-pi-fail.2-finished")  # before mpiop starts, as in a switch
        manager = Manager(main, ManagerConfig(namespace=namespace, workers=4, settings=Settings(kept_attempts=1)))
        stop = asyncio.Event()
        task = asyncio.create_task(supervise(manager, elector, stop))
        try:
            await asyncio.wait_for(elector.leading.wait(), 30)
            await asyncio.wait_for(manager.synced.wait(), 30)
            assert await own_pod.mark(lease_client, serving=True), "the leader's pod labelled as it serves"
            labels = (await kube.get(PODS, SYSTEM, OWN_POD))["metadata"]["labels"]
            assert labels[STATUS_ENDPOINT_LABEL] == STATUS_ENDPOINT_SERVING
            # The leader's CA in the GPU layout webhook's configuration (`mutatingwebhookconfigurations get, patch`).
            assert await layout_webhook.install_ca_bundle(main, WEBHOOK, ca.cert_pem)
            await cluster.create_job(mpijob("life", workers=1, run_policy={"ttlSecondsAfterFinished": 5}))
            await review_a_pods_token(cluster, main, "life")
            await cluster.create_job(make_mpijob("total").total_gpus(8).pod_spec(
                "Worker", nodeSelector={"kubernetes.io/hostname": GPU_NODE},
                tolerations=[{"operator": "Exists"}]).manifest())

            async def laid_out() -> bool:
                job = await cluster.job("total") or {}
                return bool(job.get("spec", {}).get("mpiReplicaSpecs", {}).get("Worker", {}).get("replicas") == 1)

            await eventually(laid_out, what="the total-GPU job laid out")
            await cluster.create_job(make_mpijob("total-dra").total_gpus(8, device_class=DRA_CLASS).pod_spec(
                "Worker", nodeSelector={"kubernetes.io/hostname": GPU_NODE},
                tolerations=[{"operator": "Exists"}]).manifest())
            await eventually(lambda: kube.get_or_none(RESOURCE_CLAIM_TEMPLATES, namespace, "total-dra-gpus"),
                             what="the DRA total-GPU job's ResourceClaimTemplate")
            await cluster.create_job(mpijob("evicted", workers=1))
            await evict_for_a_device_taint(cluster, "evicted")
            for _ in range(2):
                await suspend_and_resume(cluster, "life")
            await fail_attempt(cluster, "life")
            # The second failure's logs replace the first's (--kept-attempts 1): `configmaps delete`.
            await drive_to_success(cluster, "life", launcher=await fail_attempt(cluster, "life", 1))

            async def deleted() -> bool:
                return await cluster.job("life") is None

            await eventually(deleted, timeout=30, what="the job deleted by its TTL")

            async def kubeflows_launcher_deleted() -> bool:
                return not (await kube.list(BATCH_JOBS, namespace))["items"]

            await eventually(kubeflows_launcher_deleted, what="the adopted job restarted, kubeflow's launcher Job gone")
        except AssertionError as error:
            stopped = f"; the operator stopped early: {task.exception() or task.result()}" if task.done() else ""
            raise AssertionError(f"{error}{stopped}") from error
        finally:
            stop.set()
            run.exit_code = await asyncio.wait_for(task, 30)
        run.lease_after = await kube.get(LEASES, SYSTEM, LEASE)
        yield run
    finally:
        for client in clients:
            await client.close()
        await delete_namespace(kube, namespace)
        with contextlib.suppress(ApiError):
            await kube.delete(NODES, None, GPU_NODE)
        with contextlib.suppress(ApiError):
            await kube.delete(RESOURCE_SLICES, None, f"{GPU_NODE}-{DRA_CLASS}")
        with contextlib.suppress(ApiError):
            await kube.delete(DEVICE_CLASSES, None, DRA_CLASS)
        with contextlib.suppress(ApiError):
            await kube.delete(PODS, SYSTEM, OWN_POD, grace_period_seconds=0)
        with contextlib.suppress(ApiError):
            await kube.delete(layout_webhook.CONFIGURATIONS, None, WEBHOOK)
        with contextlib.suppress(ApiError):
            await kube.delete(SECRETS, SYSTEM, STATUS_CA.name)


async def test_a_whole_job_life_runs_on_the_service_accounts_token_alone(lifecycle: Run, token_kubeconfig: str) -> None:
    assert lifecycle.exit_code == 0
    # The token really is all it had: anything outside the rules is refused.
    client = await KubeClient.connect(token_kubeconfig)
    try:
        for path in ("/api/v1/namespaces", f"/api/v1/namespaces/{SYSTEM}/secrets/anything"):
            with pytest.raises(ApiError) as refused:
                await client.request("GET", path)
            assert refused.value.status == 403
    finally:
        await client.close()
    not_allowed = [c for c in lifecycle.codes if c[2] in (401, 403)]
    assert not not_allowed, f"requests the ServiceAccount may not make: {not_allowed}"
    assert lifecycle.lease_after["spec"].get("holderIdentity") in ("", None), "the lease was not released"


async def test_every_rule_grants_only_what_the_operator_used(lifecycle: Run, rbac_objects: list[JSON]) -> None:
    granted = rules(rbac_objects)
    used = set(lifecycle.requests)
    ungranted = {r for r in used if not any(allows(rule, r) for rule in granted)}
    assert not ungranted, f"used but not granted: {sorted(ungranted)}"
    unused = set()
    for rule in granted:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    names = rule.get("resourceNames") or [None]
                    if (verb, group, resource) in ADMISSION_ONLY:
                        continue
                    for name in names:
                        if not any(r[:3] == (verb, group, resource) and name in (None, r[3]) for r in used):
                            unused.add((verb, group, resource, name))
    assert not unused, f"granted but never used: {sorted(unused, key=str)}"
    print("\nrequests, as RBAC sees them:", *sorted({r[:3] for r in used}), sep="\n  ")
