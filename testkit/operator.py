"""Running mpiop in-process against the real apiserver, and playing the kubelet as kubeflow's tests do."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
import structlog.testing

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER
from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.desired.settings import Settings
from mpiop.kube import resourceversion
from mpiop.kube.client import MPIJOBS, NODES, PODS, KubeClient, RequestHook
from mpiop.kube.informer import Informer, object_key
from testkit.mpijobs import make_mpijob

T = TypeVar("T")


@dataclass
class RequestLog:
    """Every request the operator made: (verb, resource, code)."""

    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, verb: str, resource: str, code: int, seconds: float) -> None:
        self.calls.append((verb, resource, code))

    def writes(self) -> Counter[tuple[str, str]]:
        return Counter((v, r) for v, r, _ in self.calls if v in ("POST", "PUT", "PATCH", "DELETE"))


SETTLE_TIMERS_WITHIN = 2.0
"""A delayed add due this soon is work still to do for `Operator.settle` (a refused creation's first retries,
a pass's own requeue); later timers (a deadline, a TTL, a long backoff) are the test's to wait for."""


async def cache_lag(informer: Informer, kube: KubeClient) -> list[str]:
    """The keys where `informer`'s cache and the apiserver (listed now, as the informer lists) disagree: an
    object missing, one still cached after its deletion, or another resourceVersion."""
    query = {"labelSelector": informer.label_selector} if informer.label_selector else {}
    listed = await kube.list(informer.resource, informer.namespace, **query)
    undecodable = informer.undecodable()
    live = {object_key(item): resourceversion.of(item) for item in listed["items"]
            if object_key(item) not in undecodable and (informer.accept is None or informer.accept(item))}
    cached = {key: resourceversion.of(obj) for key in informer.cached_keys() if (obj := informer.get(key))}
    return sorted(key for key in live.keys() | cached.keys() if live.get(key) != cached.get(key))


@dataclass
class Operator:
    manager: Manager
    requests: RequestLog
    kube: KubeClient  # the test's own client of the same apiserver (its requests are not in `requests`)

    async def settle(self, timeout: float = 30.0, within: float = SETTLE_TIMERS_WITHIN) -> None:
        """Wait until the operator is quiet: its caches hold what the apiserver holds, and it has nothing
        left to do (`Manager.work_left`: nothing queued or in flight, no soft write held back, no delayed add
        due within `within` s, no background work, every Event sent). Then a test may assert that nothing
        more happens, without sleeping. Fails, saying what is still going on, after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.manager.work_left(within)
            if not left:
                adds = self.manager.queue.adds
                left = [f"{informer.resource.plural} {key} not in the cache as the apiserver has it"
                        for informer in self.manager.caches.all() for key in await cache_lag(informer, self.kube)]
                if not left and self.manager.queue.adds == adds and not self.manager.work_left(within):
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"the operator is not quiet after {timeout}s: {'; '.join(left[:5])}")
            await asyncio.sleep(0.05)  # poll interval: the operator's state, and its caches against the apiserver


RECONCILE_FAILED = "reconcile failed; retrying with backoff"


def unexpected_reconcile_errors(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Reconcile failures in captured log lines, less optimistic-concurrency conflicts (a stale cache's write
    is refused with 409 and retried: expected and harmless)."""
    return [str(line.get("error")) for line in logs
            if line.get("event") == RECONCILE_FAILED and " 409 Conflict:" not in str(line.get("error"))]


@asynccontextmanager
async def running_operator(kubeconfig: str, namespace: str, *, allow_reconcile_errors: bool = False,
                           allow_api_warnings: bool = False,
                           client_class: type[KubeClient] = KubeClient, on_request: RequestHook | None = None,
                           **settings: Any) -> AsyncIterator[Operator]:
    """The operator in-process on `namespace`. Like kueue's verifyLogs, leaving fails if it logged a reconcile
    error meanwhile (unless the test provokes them on purpose: `allow_reconcile_errors`), or if the apiserver sent
    its client a Warning header (a deprecated API, a pod field it warns of: `allow_api_warnings`). `client_class`: a
    KubeClient subclass injecting a fault at the client's edge (the apiserver stays real); `on_request`: the
    client's hook, to see each request as it leaves; `settings`: fields of the operator's Settings."""
    requests = RequestLog()
    client = await client_class.connect(kubeconfig, qps=0, burst=1000, observer=requests, on_request=on_request)
    probe = await KubeClient.connect(kubeconfig, qps=0, burst=1000)
    manager = Manager(client, ManagerConfig(namespace=namespace, workers=4, settings=Settings(**settings)))
    stop = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(manager.run(stop))
        try:
            await asyncio.wait_for(manager.synced.wait(), 30)
            yield Operator(manager, requests, probe)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
            await client.close()
            await probe.close()
    errors = unexpected_reconcile_errors(logs)
    if errors and not allow_reconcile_errors:
        raise AssertionError(f"the operator logged {len(errors)} reconcile error(s): {errors[:3]}")
    if client.warnings.total() and not allow_api_warnings:  # a deprecated API or a field the apiserver warns of
        raise AssertionError(f"the apiserver warned the operator: {client.warnings.counts}")


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0, what: str = "") -> T:
    """Poll until `probe` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.1)  # poll interval of `probe`
    raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}; last value: {last!r}")


def mpijob(name: str, *, workers: int = 2, gpus: int | None = None, launcher_command: list[str] | None = None,
           run_policy: JSON | None = None, **spec: Any) -> JSON:
    """The manifest of the builders' job, in the keywords most integration tests need."""
    job = make_mpijob(name).workers(workers).run_policy(**(run_policy or {})).spec(**spec)
    if gpus is not None:
        job.gpus(gpus)
    if launcher_command:
        job.command(LAUNCHER, *launcher_command)
    if not workers:
        job.without(WORKER)
    return job.manifest()


class Cluster:
    """Test-side view of one namespace: read jobs and pods, and write pod status like a kubelet."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace

    async def create_job(self, manifest: JSON) -> JSON:
        return await self.kube.create(MPIJOBS, self.ns, manifest)

    async def job(self, name: str) -> JSON | None:
        return await self.kube.get_or_none(MPIJOBS, self.ns, name)

    async def condition(self, name: str, condition_type: str) -> JSON | None:
        job = await self.job(name)
        for condition in ((job or {}).get("status") or {}).get("conditions") or []:
            if condition["type"] == condition_type and condition["status"] == "True":
                return dict(condition)
        return None

    async def pods(self) -> dict[str, JSON]:
        listed = await self.kube.list(PODS, self.ns)
        return {p["metadata"]["name"]: p for p in listed["items"]}

    async def pod(self, name: str) -> JSON | None:
        return await self.kube.get_or_none(PODS, self.ns, name)

    async def set_phase(self, name: str, phase: str, *, ready: bool = False, exit_code: int | None = None,
                        reason: str | None = None, pod_reason: str | None = None, message: str | None = None) -> None:
        """Write pod status as a kubelet would (no kubelet runs in integration tests)."""
        pod = await self.kube.get(PODS, self.ns, name)
        container = pod["spec"]["containers"][0]["name"]
        status: JSON = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        if exit_code is not None:
            status["containerStatuses"] = [{
                "name": container, "ready": False, "restartCount": 0, "image": "img", "imageID": "",
                "state": {"terminated": {"exitCode": exit_code, "reason": reason or "Error"}},
            }]
        if pod_reason:
            status["reason"] = pod_reason
        if message:
            status["message"] = message
        await self.kube.patch(PODS, self.ns, name, {"status": status}, subresource="status")

    async def run_all(self, names: list[str]) -> None:
        for name in names:
            await self.set_phase(name, "Running", ready=True)

    async def bind(self, pod: str, node: str) -> None:
        """What the scheduler does: the pod's nodeName set through its binding subresource."""
        await self.kube.request("POST", PODS.path(self.ns, pod, "binding"), body={
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    @asynccontextmanager
    async def bare_node(self, suffix: str = "node") -> AsyncIterator[str]:
        """A Node object named after the namespace, with no kubelet behind it (a pod bound to it and deleted
        gracefully stays terminating); deleted afterwards."""
        name = f"{self.ns}-{suffix}"
        await self.kube.create(NODES, None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        try:
            yield name
        finally:
            await self.kube.delete(NODES, None, name)


async def live_pods(cluster: Cluster, names: Iterable[str]) -> bool:
    """Whether every one of `names` exists and none is being deleted (an earlier attempt's pod of the same
    name still terminating is not the one to run)."""
    pods = await cluster.pods()
    return all(name in pods and not pods[name]["metadata"].get("deletionTimestamp") for name in names)


async def start_pods(cluster: Cluster, name: str, workers: int = 1, *, launcher: str = "",
                     nodes: Mapping[str, str] | None = None, running: bool = True) -> list[str]:
    """Play the scheduler and the kubelet for job `name`'s pods (`launcher`: the attempt's launcher,
    `<name>-launcher` in the first one): wait until they exist, bind each that `nodes` names to its node, set
    them Running and Ready (the workers first), then wait for the job's Running condition unless `running` is
    False. The pods' names, the launcher first."""
    pods = [launcher or f"{name}-launcher", *(f"{name}-worker-{i}" for i in range(workers))]
    await eventually(lambda: live_pods(cluster, pods), what=f"pods {pods}")
    for pod, node in (nodes or {}).items():
        await cluster.bind(pod, node)
    await cluster.run_all([*pods[1:], pods[0]])
    if running:
        await eventually(lambda: cluster.condition(name, "Running"), what=f"{name} Running")
    return pods


async def drive_to_success(cluster: Cluster, name: str, launcher: str = "", workers: int = 1) -> None:
    """Play the kubelet through a job's life until it is Succeeded and its running workers deleted
    (`launcher`: the attempt's launcher, `<name>-launcher` in the first one)."""
    launcher, *_ = await start_pods(cluster, name, workers, launcher=launcher)

    async def only_launcher_left() -> bool:
        return not any(p.startswith(f"{name}-worker-") for p in await cluster.pods())

    await cluster.set_phase(launcher, "Succeeded")
    await eventually(lambda: cluster.condition(name, "Succeeded"), what=f"{name} Succeeded")
    await eventually(only_launcher_left, what=f"{name}'s running workers deleted")
