"""Wires informers, the work queue and the reconcile workers together, and shuts them down cleanly.

Informer events enqueue the owning job's key; `workers` coroutines take keys off the queue and
reconcile them (never one key in two workers at once); errors go back with per-key exponential backoff,
timers (deadlines, TTLs) with a delayed add. Every `resync_seconds` all jobs are enqueued again.
With leader election, informers start (and warm their caches) at once; workers only once `leading` is set.
Every task runs under the Supervisor: one that dies stops the manager (and fails /healthz). An object an
informer cannot decode is logged, counted (`mpiop_undecodable_objects_total`) and, by the working
process, given a Warning Event; every other job goes on.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from dataclasses import dataclass
from typing import Any

import structlog

from mpiop import metrics, names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.caches import (
    OWNER_INDEX,
    Caches,
    UnchangedFilter,
    owner_key,
    pod_finished_now,
    pod_group_api_missing,
    same_but_version,
    same_mpijob_but_progress,
)
from mpiop.controller.events import EventRecorder
from mpiop.controller.reconciler import Reconciler, utcnow
from mpiop.controller.supervisor import Supervisor
from mpiop.controller.workqueue import (
    QUEUE_BURST,
    QUEUE_QPS,
    QueueShutDownError,
    WorkQueue,
    default_controller_rate_limiter,
)
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.kube.client import DEVICE_CLASSES, NODES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_SLICES, ApiError, KubeClient
from mpiop.kube.codec import UNDECODABLE
from mpiop.kube.informer import object_key
from mpiop.plan import Event
from mpiop.policies import gpu_layout
from mpiop.status import conditions

log = structlog.get_logger(__name__)


def _either(first: UnchangedFilter, second: UnchangedFilter) -> UnchangedFilter:
    return lambda old, new: first(old, new) or second(old, new)


async def _until(awaited: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Wait for `awaited` or `stop`, whichever first; True when `awaited` finished (and stop is not set)."""
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([awaited, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (awaited, stopped):
            pending.cancel()
    return not stop.is_set()


@dataclass
class ManagerConfig:
    """The `mpiop run` flags the manager reads; those that shape a job's objects are `settings`, as decide
    reads them. Each default is here or in Settings, once: the flags and their help text read it."""
    namespace: str | None = None  # None: every namespace
    workers: int = 32
    resync_seconds: float = 300.0
    watch_timeout_seconds: int = 300
    queue_qps: float = QUEUE_QPS
    queue_burst: int = QUEUE_BURST
    lifecycle_events: bool = True  # False: MPIJobCreated/Running/Succeeded are logged, not sent
    settings: Settings = DEFAULT_SETTINGS
    gpu_layout: bool = True  # watch GPU nodes to lay out jobs that state their total GPUs (spec.gpus)
    # A pod's event queues its job's pass this much later, so the events of a job's pods in that time cost one
    # pass (the Job controller of kube-controller-manager batches pod events the same way, for a second); a pod
    # that has just succeeded or failed queues it at once.
    pod_event_batch_seconds: float = 0.5

    def unsent_event_reasons(self) -> frozenset[str]:
        """Events only logged, never sent: every job's three lifecycle Events under --no-lifecycle-events."""
        return frozenset() if self.lifecycle_events else conditions.LIFECYCLE_REASONS


class Manager:
    def __init__(self, client: KubeClient, config: ManagerConfig, supervisor: Supervisor | None = None) -> None:
        self.client = client
        self.config = config
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self.caches = Caches.build(client, config.namespace, config.watch_timeout_seconds,
                                    on_watch_restart=metrics.observe_watch_restart,
                                    gang_scheduler=config.settings.gang_scheduler, watch_nodes=config.gpu_layout,
                                    watch_claim_templates=bool(config.settings.gpu_device_classes),
                                    max_mpijob_bytes=config.settings.max_mpijob_kib * 1024)
        metrics.watching(informer.resource.plural for informer in self.caches.all())
        self.queue: WorkQueue[str] = WorkQueue(
            default_controller_rate_limiter(qps=config.queue_qps, burst=config.queue_burst),
            on_wait=metrics.QUEUE_WAIT_SECONDS.observe,
        )
        self.recorder = EventRecorder(client, unsent_reasons=config.unsent_event_reasons())
        self.reconciler = Reconciler(client, self.caches, self.recorder, settings=config.settings)
        self.synced = asyncio.Event()
        self.working = False  # workers running: this process reconciles (leads, or has no election)
        self._ids = itertools.count(1)
        self._reconciled_once = False  # the first reconcile's end is logged at info (a start's time to working)
        metrics.observe_queue(self.queue)
        metrics.MPIJOB_GAUGES.source = metrics.MPIJobSource(
            mpijobs=lambda: self.caches.mpijobs.cached_objects(),
            has_launcher=self._has_launcher,
            active=lambda: self.working,
        )
        self.caches.mpijobs.handlers.append(self._on_job)
        if self.caches.nodes is not None:
            self.caches.nodes.handlers.append(self._on_node)
        if self.caches.claim_templates is not None:
            self.caches.claim_templates.handlers.append(self._on_claim_template)
        for dra in (self.caches.resource_slices, self.caches.device_classes):
            if dra is not None:  # a node's devices: as a node's change
                dra.handlers.append(self._on_node)
        for informer, unchanged in self.caches.owned_filters():
            batch = 0.0
            if informer is self.caches.pods:
                unchanged = _either(unchanged, self.reconciler.deleting.only_this_deletion)
                batch = config.pod_event_batch_seconds
            informer.handlers.append(functools.partial(self._on_owned, unchanged, batch))
        for informer in self.caches.all():
            informer.on_undecodable = self._on_undecodable

    def _has_launcher(self, namespace: str, job: str) -> bool:
        """Any launcher pod of the job (each attempt's launcher has its own name), or an adopted job's
        kubeflow launcher Job."""
        return (any(podstate.role(p) == names.LAUNCHER_ROLE
                    for p in self.caches.pods.by_index(OWNER_INDEX, f"{namespace}/{job}"))
                or self.caches.launcher_batch_jobs.get(f"{namespace}/{job}-launcher") is not None)

    def _on_job(self, old: JSON | None, new: JSON | None) -> None:
        if old is not None and new is not None and same_mpijob_but_progress(old, new):
            return
        self.queue.add(object_key(new if new is not None else old))  # type: ignore[arg-type]

    def _on_owned(self, unchanged: UnchangedFilter, batch: float, old: JSON | None, new: JSON | None) -> None:
        if old is not None and new is not None and unchanged(old, new):
            return  # e.g. a pod bound to a node: nothing a decision reads changed
        key = owner_key(new if new is not None else old)  # type: ignore[arg-type]
        if key is None:
            return
        if batch <= 0 or pod_finished_now(old, new):
            self.queue.add(key)
        elif not self.queue.waiting_to_start(key):  # a pass still to start reads the cache as it is then
            self.queue.add_after(key, batch)

    def _on_node(self, old: JSON | None, new: JSON | None) -> None:
        """A GPU node came, went or changed shape: the jobs still to be laid out look again."""
        if old is not None and new is not None and same_but_version(old, new):
            return
        for raw in list(self.caches.mpijobs.cached_objects()):
            if (raw.get("spec") or {}).get("gpus") is not None and gpu_layout.needs_layout(MPIJob.model_validate(raw)):
                self.queue.add(object_key(raw))

    def _on_claim_template(self, old: JSON | None, new: JSON | None) -> None:
        """A ResourceClaimTemplate came, went or changed: the jobs whose claims are made from it look again (one
        waiting for it goes on, policies/gpu_slots)."""
        if old is not None and new is not None and same_but_version(old, new):
            return
        for key in self.caches.jobs_naming(new if new is not None else old):  # type: ignore[arg-type]
            self.queue.add(key)

    async def _may_list_claim_templates(self) -> bool:
        """Whether ResourceClaimTemplates can be listed (the role grants it, the apiserver serves resource.k8s.io/v1):
        otherwise the process runs on without their informer, which would never sync, and a job whose claims are
        made from one waits saying so (desired.gpus)."""
        try:
            await self.client.list(RESOURCE_CLAIM_TEMPLATES, self.config.namespace, limit=1)
        except ApiError as error:
            if error.status not in (403, 404):
                return True  # the informer retries whatever this was
            log.warning("ResourceClaimTemplates cannot be listed: workers whose GPUs come through DRA claims wait "
                        "unless their job sets slotsPerWorker (deploy/'s role grants list and watch on them; "
                        "resource.k8s.io/v1 is served from Kubernetes 1.34; --gpu-device-classes= says so without "
                        "asking)", status=error.status, error=error.message[:200])
            return False
        return True

    async def _may_list_dra(self) -> bool:
        """Whether ResourceSlices and DeviceClasses can be listed: otherwise total-GPU jobs through DRA wait saying
        so (policies/gpu_layout), and the Node informer keeps only nodes with an extended resource."""
        for resource in (RESOURCE_SLICES, DEVICE_CLASSES):
            try:
                await self.client.list(resource, limit=1)
            except ApiError as error:
                if error.status not in (403, 404):
                    continue  # the informer retries whatever this was
                log.warning(f"{resource.plural} cannot be listed: jobs stating spec.gpus with spec.gpuDeviceClassName "
                            "are not laid out (deploy/'s ClusterRole grants list and watch on resourceslices and "
                            "deviceclasses; resource.k8s.io/v1 is served from Kubernetes 1.34)",
                            status=error.status, error=error.message[:200])
                return False
        return True

    async def _may_list_nodes(self) -> bool:
        """Whether the operator's role lets it list nodes: one with an older (or namespaced) role runs on without
        the Node informer, which would otherwise never sync, and total-GPU jobs wait saying so."""
        try:
            await self.client.list(NODES, limit=1)
        except ApiError as error:
            if not error.forbidden:
                return True  # the informer retries whatever this was
            log.warning("RBAC does not grant list on nodes: jobs stating their total GPUs (spec.gpus) are not laid "
                        "out (deploy/'s ClusterRole grants it; --no-gpu-layout says so without asking)",
                        error=error.message[:200])
            return False
        return True

    def work_left(self, within: float = 0.0) -> list[str]:
        """What this operator will still do without any new change in the cluster, each said in words: keys
        queued or being reconciled, soft writes held back, delayed adds due within `within` seconds, work a
        pass left running, Events not sent yet. Empty: it is quiet (what a test waits for before asserting
        that nothing more happens; later timers, a deadline or a TTL, are its to wait for)."""
        queue, left = self.queue, []
        if len(queue):
            left.append(f"{len(queue)} key(s) queued")
        if queue.in_flight():
            left.append(f"{queue.in_flight()} key(s) being reconciled")
        if self.reconciler.soft_writes.held():
            left.append(f"soft writes of {self.reconciler.soft_writes.held()} job(s) held back")
        due = queue.next_delayed_add()
        if due is not None and due <= within:
            left.append(f"a delayed add due in {due:.2f}s")
        if self.reconciler.background_work():
            left.append(f"{self.reconciler.background_work()} background task(s) of passes")
        if self.recorder.unsent():
            left.append(f"{self.recorder.unsent()} Event(s) not sent yet")
        if self.caches.claim_templates is not None and self.caches.claim_templates.fetching():
            left.append(f"{self.caches.claim_templates.fetching()} ResourceClaimTemplate fetch(es) in flight")
        return left

    async def preflight(self) -> None:
        """Fail at start, with the reason, on what would only fail later: a gang scheduler without its CRD."""
        gang = self.config.settings.gang_scheduler
        if gang is not None and (missing := await pod_group_api_missing(self.client, gang)) is not None:
            raise SystemExit(missing)

    def _on_undecodable(self, stub: JSON) -> None:
        """The informer logged it and keeps it out of its cache: count it, and tell its owner (if working)."""
        metrics.UNDECODABLE_OBJECTS.labels(str(stub.get("kind"))).inc()
        if self.working:
            self._undecodable_event(stub)

    def _undecodable_event(self, stub: JSON) -> None:
        meta = stub["metadata"]
        if not meta.get("namespace") or not meta.get("uid"):
            return  # nowhere to put an Event
        involved = {"apiVersion": str(stub.get("apiVersion")), "kind": str(stub.get("kind")),
                    "name": str(meta["name"]), "namespace": str(meta["namespace"]), "uid": str(meta["uid"])}
        event = Event("Warning", "Undecodable", (
            f"mpiop cannot decode this object and ignores it until it is changed or deleted ({stub[UNDECODABLE]}); "
            "it nests deeper than JSON decoders accept, under a field its schema preserves unchanged"))
        self.recorder.record_on(involved, event, utcnow())

    async def run(self, stop: asyncio.Event, leading: asyncio.Event | None = None) -> None:
        """Run until `stop` is set; then finish in-flight reconciles and return.

        With `leading`, reconcile only once it is set (leader election); cancel the task to stop at once.
        """
        self.supervisor.stop_on_failure(stop)
        if self.caches.nodes is not None and not await self._may_list_nodes():
            self.caches.nodes = None
        if self.caches.claim_templates is not None and not await self._may_list_claim_templates():
            self.caches.claim_templates = None
        if self.caches.resource_slices is not None and not (
                self.caches.nodes is not None and self.caches.claim_templates is not None
                and await self._may_list_dra()):
            self.caches.resource_slices = self.caches.device_classes = None
        informers = [self.supervisor.spawn(i.run(), name=f"informer-{i.resource.plural}") for i in self.caches.all()]
        workers: list[asyncio.Task[None]] = []
        try:
            started = time.monotonic()
            if not await _until(asyncio.gather(*(i.synced.wait() for i in self.caches.all())), stop):
                return
            self.synced.set()
            log.info("caches synced", seconds=round(time.monotonic() - started, 3),
                     jobs=self.caches.mpijobs.count(), pods=self.caches.pods.count(),
                     process_cpu_s=round(time.process_time(), 3))  # the CPU a start took, its imports included
            if leading is not None and not leading.is_set():
                log.info("standing by until elected leader")
                if not await _until(asyncio.ensure_future(leading.wait()), stop):
                    return
            self.working = True
            for informer in self.caches.all():  # seen before this process was working: tell their owners now
                for stub in informer.undecodable().values():
                    self._undecodable_event(stub)
            workers = [self.supervisor.spawn(self._work(), name=f"worker-{n}") for n in range(self.config.workers)]
            resync = self.supervisor.spawn(self._resync(), name="resync")
            await stop.wait()
            resync.cancel()
            log.info("stopping: finishing in-flight reconciles")
            await self.queue.shut_down_with_drain()
            await asyncio.gather(*workers, return_exceptions=True)
            await self.reconciler.finish_background()
            await self.recorder.close()
        finally:
            self.working = False
            self.queue.shut_down()
            for task in [*informers, *workers]:
                task.cancel()
            await asyncio.gather(*informers, *workers, return_exceptions=True)
            await self.recorder.close(timeout=0)  # after a graceful stop: already done

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            for key in list(self.caches.mpijobs.cached_keys()):
                self.queue.add(key)

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDownError:
                return
            await self.process(key)

    async def process(self, key: str) -> None:
        """One worker's turn with `key`, taken off the queue: reconcile it, then requeue it (later, or rate limited
        after an error) or forget it, and mark it done."""
        reconcile_id = next(self._ids)
        started = time.monotonic()
        with structlog.contextvars.bound_contextvars(job=key, reconcile_id=reconcile_id):
            try:
                requeue_after = await self.reconciler.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                metrics.RECONCILE_SECONDS.labels("error").observe(time.monotonic() - started)
                metrics.QUEUE_RETRIES.inc()
                log.warning("reconcile failed; retrying with backoff", error=str(error),
                            retries=self.queue.num_requeues(key), exc_info=not isinstance(error, (OSError, ApiError)))
                self.queue.add_rate_limited(key)
            else:
                seconds = time.monotonic() - started
                metrics.RECONCILE_SECONDS.labels("ok").observe(seconds)
                log.debug("reconciled", seconds=round(seconds, 4), requeue_after=requeue_after)
                if not self._reconciled_once:
                    self._reconciled_once = True
                    log.info("first reconcile done", seconds=round(seconds, 4),
                             process_cpu_s=round(time.process_time(), 3))
                self.queue.forget(key)
                if requeue_after is not None:
                    self.queue.add_after(key, requeue_after)
            finally:
                self.queue.done(key)
