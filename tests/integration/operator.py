"""Running mpiop in-process against the real apiserver, and playing the kubelet as kubeflow's tests do."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mpiop.controller.manager import Manager, ManagerConfig
from mpiop.kube.client import MPIJOBS, PODS, ApiError, KubeClient

T = TypeVar("T")
JSON = dict[str, Any]


@dataclass
class RequestLog:
    """Every request the operator made: (verb, resource, code)."""

    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, verb: str, resource: str, code: int, seconds: float) -> None:
        self.calls.append((verb, resource, code))

    def writes(self) -> Counter[tuple[str, str]]:
        return Counter((v, r) for v, r, _ in self.calls if v in ("POST", "PUT", "PATCH", "DELETE"))


@dataclass
class Operator:
    manager: Manager
    requests: RequestLog


@asynccontextmanager
async def running_operator(kubeconfig: str, namespace: str, **config: Any) -> AsyncIterator[Operator]:
    requests = RequestLog()
    client = await KubeClient.connect(kubeconfig, qps=0, burst=1000, observer=requests)
    manager = Manager(client, ManagerConfig(namespace=namespace, workers=4, **config))
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await asyncio.wait_for(manager.synced.wait(), 30)
        yield Operator(manager, requests)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0, what: str = "") -> T:
    """Poll until `probe` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}; last value: {last!r}")


def mpijob(name: str, *, workers: int = 2, gpus: int | None = None, launcher_command: list[str] | None = None,
           run_policy: JSON | None = None, **spec: Any) -> JSON:
    worker_container: JSON = {"name": "main", "image": "mpioperator/mpi-pi:openmpi"}
    if gpus is not None:
        worker_container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    replica_specs: JSON = {
        "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{
            "name": "main", "image": "mpioperator/mpi-pi:openmpi",
            "command": launcher_command or ["mpirun", "/home/mpiuser/pi"]}]}}},
    }
    if workers:
        replica_specs["Worker"] = {"replicas": workers, "template": {"spec": {"containers": [worker_container]}}}
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {"mpiReplicaSpecs": replica_specs, "runPolicy": run_policy or {}, **spec},
    }


class Cluster:
    """Test-side view of one namespace: read jobs and pods, and write pod status like a kubelet."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace

    async def create_job(self, manifest: JSON) -> JSON:
        return await self.kube.create(MPIJOBS, self.ns, manifest)

    async def job(self, name: str) -> JSON | None:
        try:
            return await self.kube.get(MPIJOBS, self.ns, name)
        except ApiError as error:
            if error.not_found:
                return None
            raise

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
        try:
            return await self.kube.get(PODS, self.ns, name)
        except ApiError as error:
            if error.not_found:
                return None
            raise

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
