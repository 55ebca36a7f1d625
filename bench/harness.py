"""The benchmark's view of the cluster: its own informers (mpiop's Informer, with a tiny trim) that time
events as they arrive, the jobs and owned objects it makes, and namespace and pod helpers. The operator
process is operator.py's."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

from devcluster.simulated import finished_pod_status
from mpiop import names, podstate, ssh
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER, CleanPodPolicy, MPIJob
from mpiop.decide import decide
from mpiop.desired import objects, pods
from mpiop.kube.client import (
    CONFIGMAPS,
    MPIJOBS,
    PODS,
    SECRETS,
    SERVICES,
    ApiError,
    KubeClient,
)
from mpiop.kube.informer import Informer
from mpiop.plan import Observed
from testkit import namespaces
from testkit.mpijobs import make_mpijob
from testkit.namespaces import create_namespace

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
ROOT = Path(__file__).resolve().parents[1]


def _trim_pod(pod: JSON) -> JSON:
    meta = pod.get("metadata", {})
    status = pod.get("status") or {}
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion", "labels")},
            "node": (pod.get("spec") or {}).get("nodeName"), "phase": status.get("phase")}


def _trim_mpijob(job: JSON) -> JSON:
    meta = job.get("metadata", {})
    conditions = ((job.get("status") or {}).get("conditions")) or []
    return {"metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion")},
            "true": sorted(c["type"] for c in conditions if c.get("status") == "True")}


class Tracker:
    """When each pod appeared and ran, and when each job first had each condition True, in one namespace."""

    def __init__(self, kube: KubeClient, namespace: str, *, pods: bool = True) -> None:
        self.namespace = namespace
        self.informers: list[Informer] = [Informer(kube, MPIJOBS, namespace, trim=_trim_mpijob, page_size=1000)]
        if pods:
            self.informers.append(Informer(kube, PODS, namespace, trim=_trim_pod, page_size=1000))
            self.informers[1].handlers.append(self._on_pod)
        self.informers[0].handlers.append(self._on_job)
        self.pod_added: dict[str, float] = {}
        self.pod_running: dict[str, float] = {}
        self.job_true: dict[str, dict[str, float]] = {}
        self.on_condition: list[Callable[[str, str, float], None]] = []
        self.on_pod_running: list[Callable[[JSON], None]] = []  # a pod first seen Running (as trimmed here)
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def jobs(self) -> Informer:
        return self.informers[0]

    @property
    def pods(self) -> Informer:
        return self.informers[1]

    def _on_pod(self, old: JSON | None, new: JSON | None) -> None:
        if new is None:
            return
        now = time.monotonic()
        name = new["metadata"]["name"]
        self.pod_added.setdefault(name, now)
        if new.get("phase") == "Running" and name not in self.pod_running:
            self.pod_running[name] = now
            for callback in self.on_pod_running:
                callback(new)
        self._changed.set()

    def _on_job(self, old: JSON | None, new: JSON | None) -> None:
        if new is None:
            return
        now = time.monotonic()
        name = new["metadata"]["name"]
        seen = self.job_true.setdefault(name, {})
        for condition in new["true"]:
            if condition not in seen:
                seen[condition] = now
                for callback in self.on_condition:
                    callback(name, condition, now)
        self._changed.set()

    async def __aenter__(self) -> Tracker:
        self._tasks = [asyncio.create_task(i.run()) for i in self.informers]
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in self.informers)), 120)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> float:
        """Wait until `done()`; return the monotonic time of the event that made it true."""
        deadline = time.monotonic() + timeout
        while not done():
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return time.monotonic()

    def count_true(self, condition: str, names: Iterable[str]) -> int:
        return sum(condition in self.job_true.get(n, {}) for n in names)

    def last_true(self, condition: str, names: Iterable[str]) -> float:
        return max(self.job_true[n][condition] for n in names)


# -- objects --------------------------------------------------------------------------------------------
def bench_job(name: str, workers: int, *, gpus: int = 0, managed_by: str | None = None,
              labels: dict[str, str] | None = None, clean_pod_policy: str | None = None) -> JSON:
    """An MPIJob like a user's: launcher + workers (1 GPU each when gpus), small CPU/memory requests."""
    job = make_mpijob(name).workers(workers).slots(max(gpus, 1))
    for replica in (LAUNCHER, WORKER):
        job.request(replica, "cpu", "100m").request(replica, "memory", "128Mi")
    if gpus:
        job.gpus(gpus)
    if managed_by:
        job.managed_by(managed_by)
    if clean_pod_policy:
        job.clean_pod_policy(cast(CleanPodPolicy, clean_pod_policy))
    for key, value in (labels or {}).items():
        job.label(key, value)
    return job.manifest()


_KEYS: tuple[bytes, bytes] | None = None


def owned_objects(job_json: JSON, discover_hosts: bool = True) -> list[JSON]:
    """What mpiop makes for a job, from mpiop's own builders: Secret, ConfigMap, Service, launcher, workers.

    `discover_hosts`: False as under --no-discover-hosts (the ConfigMap's script is the fixed one)."""
    global _KEYS
    if _KEYS is None:
        _KEYS = ssh.generate_key_pair("bench")
    job = MPIJob.model_validate(job_json)
    made = [objects.ssh_secret(job, *_KEYS), objects.config_map(job, [], discover_hosts=discover_hosts),
            objects.service(job)]
    made += [pods.worker_pod(job, i, 0) for i in range(job.spec.worker_replicas)]
    made.append(pods.launcher_pod(job, 0))
    return made


def is_launcher(obj: JSON) -> bool:
    return obj.get("kind") == "Pod" and podstate.role(obj) == names.LAUNCHER_ROLE


def first_status(job_json: JSON) -> JSON:
    """The status mpiop writes on a job's first reconcile (Created, startTime, replicaStatuses)."""
    job = MPIJob.model_validate(job_json)
    plan = decide(job, Observed(), dt.datetime.now(dt.UTC).replace(microsecond=0))
    return plan.status.to_json()


RESOURCE_OF = {"Secret": SECRETS, "ConfigMap": CONFIGMAPS, "Service": SERVICES, "Pod": PODS}


async def create_ignoring_exists(kube: KubeClient, obj: JSON) -> None:
    try:
        await kube.create(RESOURCE_OF[obj["kind"]], obj["metadata"]["namespace"], obj)
    except ApiError as error:
        if not error.already_exists:
            raise


async def finish_pod(kube: KubeClient, namespace: str, name: str, phase: str = "Succeeded") -> None:
    """Write a terminated status on a pod, as its kubelet would when the container exits."""
    await kube.patch(PODS, namespace, name, {"status": finished_pod_status(["main"], phase)}, subresource="status")


async def fresh_namespace(kube: KubeClient, name: str) -> None:
    await create_namespace(kube, name)


async def delete_namespace(kube: KubeClient, name: str, timeout: float = 600.0) -> float:
    """Delete a namespace and wait until it is gone; seconds taken."""
    return await namespaces.delete_namespace(kube, name, wait=timeout)


def launcher_of(job: str) -> str:
    return f"{job}-launcher"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


async def count_owned_pods(kube: KubeClient) -> int:
    """Pods mpiop caches (its owned-objects label), in all namespaces."""
    count, token = 0, None
    while True:
        page = await kube.list(PODS, None, labelSelector=names.OWNED_SELECTOR, limit=2000,
                               **({"continue": token} if token else {}))
        count += len(page.get("items", []))
        token = page.get("metadata", {}).get("continue")
        if not token:
            return count
