"""Reconcile one MPIJob: read the caches, decide (pure), carry the plan out, status first.

Writes are idempotent and only what differs: names are deterministic, the status is written only when it
changed, and every answer to our own writes is fed back into the caches so the next pass does not act on what
it just did. Creations that do not succeed (refused, or AlreadyExists by an object the job does not control)
are what the next decision observes, like pods: it fails the job or shows why and retries. Creations go in
the plan's steps (plan.CreationSteps), each only once the one before succeeded whole (refusals: refusals.py).
Writes run through a few coroutines at a time (not one task per pod), so a 10,000-pod pass never stalls the
event loop.

Few requests per job: a pass whose writes are all soft waits for a transition to ride along with
(soft_writes.py); Events are queued to a background recorder. A pass's pods go in one DELETE collection by the
job's labels when that deletes exactly them (bulk_delete), listed from the apiserver's watch cache: listed
from etcd, the whole namespace is read for each, which made status latency at 10,000 pods 58-114 s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import structlog

from mpiop import metrics, names, podstate, ssh
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob, format_time
from mpiop.controller import bulk_delete, deleted_pods
from mpiop.controller.caches import Caches, pod_group_resource
from mpiop.controller.devices import DeviceChecks
from mpiop.controller.events import EventRecorder
from mpiop.controller.evidence import AttemptEvidence
from mpiop.controller.logreads import LogReads
from mpiop.controller.logtails import LogTails
from mpiop.controller.nodes import NodeChecks
from mpiop.controller.refusals import Refusals
from mpiop.controller.soft_writes import SoftWriteHold, may_wait, status_change
from mpiop.decide import decide
from mpiop.desired import objects
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.kube.client import BATCH_JOBS, MPIJOBS, PODS, ApiError, KubeClient
from mpiop.plan import DeviceFault, Observed, Plan, Refusal
from mpiop.policies import adoption, gpu_layout, managed_by, node_exclusion

log = structlog.get_logger(__name__)
UPDATED_FIELDS = ("data", "rules")  # what an update changes: a ConfigMap's data, a Role's rules
WRITES_PER_PASS = 32  # coroutines carrying out one pass's creations or deletions
DECIDE_ON_LOOP_UP_TO = 1000  # pods (existing + wanted); a bigger job is decided in a thread (bench/huge.py)
T = TypeVar("T")


async def all_or_none(writes: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `writes` at once; on the first failure cancel the others and wait for them, then raise it.

    asyncio.gather would return at the first failure and leave its siblings writing after the reconcile
    ended, racing the retry of the same job that the failure schedules.
    """
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(write) for write in writes]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


async def _nothing() -> DeviceFault | None:
    return None


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class Reconciler:
    def __init__(self, client: KubeClient, caches: Caches, recorder: EventRecorder, *,
                 clock: Callable[[], dt.datetime] = utcnow, settings: Settings = DEFAULT_SETTINGS,
                 write_concurrency: int = 32) -> None:
        self.client = client
        self.caches = caches
        self.recorder = recorder
        self.clock = clock
        self.settings = settings
        # Pod creations and deletions in flight, across all workers: with the client-side rate limiter off
        # (the default), this is what keeps a 256-worker job from taking every connection to the apiserver.
        self.write_limit = asyncio.Semaphore(write_concurrency)
        reads = LogReads(client)  # one read of each log, shared by the failure report and the evidence
        self.log_tails = LogTails(reads)
        self.refusals = Refusals()
        self.soft_writes = SoftWriteHold()
        self.deleting = deleted_pods.DeletionsInFlight()
        self.evidence = AttemptEvidence(client, caches, reads)
        self.nodes = NodeChecks(client)
        self.devices = DeviceChecks(client)
        self._tasks: set[asyncio.Task[None]] = set()  # work a pass left running (_background)
        # Whether the operator's role lacks `deletecollection` on pods (a role from before it was needed).
        self._collections_forbidden = False

    async def reconcile(self, key: str) -> float | None:
        """One level-triggered pass; returns seconds after which to look again, if a timer matters."""
        raw = self.caches.mpijobs.get(key)
        if raw is None:
            self.soft_writes.forget(key)
            self.refusals.forget(key)
            self.caches.disrupted_gone.forget(key)
            return None  # deleted: the garbage collector removes what it owned
        job = MPIJob.model_validate(raw)
        if job.metadata.deletion_timestamp is not None or not managed_by.is_ours(job):
            return None
        now = self.clock()
        observed = await self._observe(job)
        plan = await self._settle_failure(job, observed, now, await self._decide(job, observed, now))
        if plan.delete_mpijob:
            await self._delete_job(job)
            return None
        status = status_change(job.status, plan.status)
        wait = self.soft_writes.wait(key, may_wait(job, plan, status, observed.config_map), time.monotonic())
        if wait is not None:
            return wait if plan.requeue_after is None else min(wait, plan.requeue_after)
        try:
            await self._write_status(job, plan, status.patch, now)
        except ApiError as error:
            if error.not_found:  # deleted since the cache saw it: nothing of it is to be made any more
                return None
            raise
        # After the status (a pass whose status write fails is retried whole, so its Events are not told twice),
        # whether or not the plan changed it: an Event can be planned with a write of another object alone.
        for event in plan.events:
            self.recorder.record(job, event, now)
        if observed.nodes is not None and any(e.reason == gpu_layout.WAITING for e in plan.events):
            # The job's condition counts the GPU nodes left out; which ones, and why, is for an admin's eyes.
            log.info("total-GPU job waits", job=job.key, left_out=gpu_layout.left_out_nodes(
                job, observed.nodes, self.settings.gpu_layout_max_entries,
                dra=gpu_layout.Dra(observed.resource_slices, observed.device_classes)))
        if plan.mpijob_patch is not None:
            try:
                await self._write_mpijob_patch(job, plan, now)
            except ApiError as error:
                if error.not_found:  # deleted since its status was written: nothing of it is to be made
                    return None
                raise
            # Decide again at once, on the laid-out job the cache now holds: the watch event of this write
            # changes nothing cached, so it queues no pass of its own.
            return 0.0
        refusals = await self._apply_objects(job, plan)
        if refusals is None:
            return 0.0
        if plan.evidence is not None and plan.evidence.drop:  # older attempts' logs: off the restart's path
            self._background(self.evidence.drop(job, plan.evidence))
        if self.refusals.remember(job, refusals):
            return 0.0  # decide again at once: the next pass reports (or clears) what the apiserver said
        return plan.requeue_after

    async def _settle_failure(self, job: MPIJob, observed: Observed, now: dt.datetime, plan: Plan) -> Plan:
        """A pass that fails an attempt: its logs are saved (before the status names them and its pods go) while
        its nodes (and the devices of a pod a device taint evicted) are read; if one is NotReady or deleted (or
        a tainted device is found), the plan is decided again with that known."""
        checks = node_exclusion.nodes_to_check(plan, job, observed, self.settings)
        device = node_exclusion.device_to_check(plan, job, observed, self.settings)
        if plan.evidence is None and not checks and device is None:
            return plan
        saving = [self.evidence.save(job, plan.evidence, observed)] if plan.evidence is not None else []
        reading = self.devices.fault(job.metadata.namespace, device) if device is not None else _nothing()
        node_reads = asyncio.ensure_future(self.nodes.faults(checks))
        device_read = asyncio.ensure_future(reading)
        await asyncio.gather(node_reads, device_read, *saving)
        faults, tainted = node_reads.result(), device_read.result()
        if device is not None and tainted is not None:
            observed.device_faults[device.pod] = tainted
        if not faults and tainted is None:
            return plan
        observed.node_faults.update(faults)
        return await self._decide(job, observed, now)  # the same evidence: it does not depend on the nodes

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` after the pass without holding the job's next pass back; kept until done."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def background_work(self) -> int:
        """Work passes left running (an older attempt's logs being dropped), not done yet."""
        return len(self._tasks)

    async def finish_background(self, timeout: float = 10.0) -> None:
        """Wait (up to `timeout`) for what passes left running, at a graceful stop; cancel the rest."""
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _decide(self, job: MPIJob, observed: Observed, now: dt.datetime) -> Plan:
        decision = functools.partial(decide, job, observed, now, self.settings)
        if len(observed.pods) + job.spec.worker_replicas > DECIDE_ON_LOOP_UP_TO:
            # A big job's decision takes tens of milliseconds of CPU: in a thread, the event loop (health,
            # leases, watches, other jobs' writes) still gets the GIL every few milliseconds.
            return await asyncio.to_thread(decision)
        return decision()

    async def _observe(self, job: MPIJob) -> Observed:
        """What decide sees: the cached objects, the refusals of the last pass, and a failed container's log."""
        await self.caches.claim_templates_fetched(job)  # a template made before the job: not taken for a missing one
        observed = self.caches.observed(job, refused=self.refusals.of(job))
        if gpu_layout.needs_layout(job):
            observed.nodes = self.caches.node_list()
            if job.spec.gpu_device_class_name is not None:
                dra = self.caches.dra()
                observed.resource_slices = dra.slices
                observed.device_classes = dict(dra.classes) if dra.classes is not None else None
        await self.log_tails.fill(job, observed)  # the failure report's one I/O
        return observed

    # -- status ------------------------------------------------------------------------------------
    async def _write_status(self, job: MPIJob, plan: Plan, patch: JSON | None, now: dt.datetime) -> None:
        if patch is None:
            return
        patch["lastReconcileTime"] = format_time(now)
        body = {"metadata": {"resourceVersion": job.metadata.resource_version}, "status": patch}
        with self.caches.mpijobs.writing(job.key):  # its watch event is no news (kube/echoes)
            updated = await self.client.patch(MPIJOBS, job.metadata.namespace, job.metadata.name, body,
                                              subresource="status")
            self.caches.mpijobs.observe_write(updated)
        job.metadata.resource_version = updated["metadata"]["resourceVersion"]
        metrics.count_transitions(job, plan.status, now)

    async def _write_mpijob_patch(self, job: MPIJob, plan: Plan, now: dt.datetime) -> None:
        """The job's own spec and annotations (its GPU layout), only over the version this pass decided on."""
        assert plan.mpijob_patch is not None
        body = {**plan.mpijob_patch.body,
                "metadata": {**plan.mpijob_patch.body.get("metadata", {}),
                             "resourceVersion": job.metadata.resource_version}}
        with self.caches.mpijobs.writing(job.key):
            updated = await self.client.patch(MPIJOBS, job.metadata.namespace, job.metadata.name, body)
            self.caches.mpijobs.observe_write(updated)
        self.recorder.record(job, plan.mpijob_patch.event, now)
        log.info("wrote the job's GPU layout", layout=plan.mpijob_patch.event.message)

    # -- objects -----------------------------------------------------------------------------------
    async def _apply_objects(self, job: MPIJob, plan: Plan) -> list[Refusal] | None:
        """Carry out the creation steps (stopping at one with refusals), updates and deletions; None when an object
        to update was gone (decide again at once).

        The updates go before any pod: the pods of this pass may depend on them (an exec launcher's Role names
        the next attempt's launcher and new workers, the ConfigMap is mounted), and a pod made first could start,
        or outlive a failed patch, without them."""
        supporting = plan.creation_steps.supporting
        if plan.create_ssh_secret:
            private, public = ssh.generate_key_pair(comment=f"mpiop@{job.key}")
            supporting = [objects.ssh_secret(job, private, public), *supporting]
        refusals = await self._create_all(job, supporting)
        if not refusals and plan.pod_group is not None:  # its pods are not created without it
            refused_group = await self._write_pod_group(job, plan)
            refusals = [refused_group] if refused_group is not None else []
        for name in plan.stale_pod_groups:  # Kubernetes' gangs: the groups of attempts before this one
            await self._delete_pod_group(job, name)
        for obj in plan.objects_to_update:
            informer, name = self.caches.informer_for(obj["kind"]), obj["metadata"]["name"]
            key = f"{job.metadata.namespace}/{name}"
            try:
                with informer.writing(key):
                    updated = await self.client.patch(informer.resource, job.metadata.namespace, name,
                                                      {k: obj[k] for k in UPDATED_FIELDS if k in obj})
                    informer.observe_write(updated)
            except ApiError as error:
                if not error.not_found:
                    raise
                # Gone since the cache saw it (the garbage collector's, as its job goes, or anyone's): no pod of this
                # pass is made without it, and the next pass, at once, makes it again if the job still wants it.
                informer.observe_delete(key)
                return None
        for step in plan.creation_steps.pod_steps():
            if refusals:
                break
            refusals = await self._create_all(job, step)
        await self._delete_pods(job, plan.pods_to_delete, plan.pod_grace_seconds)
        if plan.launcher_batch_job_to_delete is not None:
            await self._delete_launcher_batch_job(plan.launcher_batch_job_to_delete)
        return refusals

    async def _create_all(self, job: MPIJob, objs: list[JSON]) -> list[Refusal]:
        """Create these (no new one after a refusal: the rest would be refused too); the refusals."""
        return [r for r in await _each(objs, lambda obj: self._create(job, obj), stop_on_result=True) if r is not None]

    async def _create(self, job: MPIJob, obj: JSON) -> Refusal | None:
        kind, name = obj["kind"], obj["metadata"]["name"]
        informer = self.caches.informer_for(kind)
        async with self.write_limit:
            try:
                with informer.writing(f"{obj['metadata']['namespace']}/{name}"):
                    created = await self.client.create(informer.resource, obj["metadata"]["namespace"], obj,
                                                       decoder=informer.decode_object)  # only cached: as its watch
                    informer.observe_write(created)
            except ApiError as error:
                if error.already_exists and (self._controls(job, kind, name)
                                             or (kind != "Pod" and await self._claim(job, kind, name))):
                    return None  # ours: in the cache by now, or kubeflow's operator made it for this job
                if error.already_exists or error.invalid or error.forbidden:
                    log.info("creation refused", kind=kind, name=name, code=error.status, error=error.message)
                    return Refusal(kind, name, error.status, error.reason, error.message)
                raise
        return None

    async def _claim(self, job: MPIJob, kind: str, name: str) -> bool:
        """An object of this name exists but is not in the cache: label it as ours if this job controls it
        (kubeflow's operator made it), so the informer sees it from now on; True if so. Anything else is left
        alone (and reported by the squatters policy)."""
        informer = self.caches.informer_for(kind)
        try:
            claimed = await self.client.patch(informer.resource, job.metadata.namespace, name,
                                              adoption.claim_patch(job), patch_type="json")
        except ApiError as error:
            if error.status in (400, 404, 409, 422):  # not this job's (the patch's test failed), or gone
                return False
            raise
        informer.observe_write(claimed)
        log.info("claimed an object kubeflow's operator made", kind=kind, name=name)
        return True

    async def _delete_launcher_batch_job(self, launcher_batch_job: JSON) -> None:
        """kubeflow's launcher Job of an adopted job, with its pods (the garbage collector deletes them)."""
        meta = launcher_batch_job["metadata"]
        await self.client.delete_if_present(BATCH_JOBS, meta["namespace"], meta["name"], uid=meta.get("uid"))
        self.caches.launcher_batch_jobs.observe_delete(f"{meta['namespace']}/{meta['name']}")
        log.info("deleted kubeflow's launcher Job", name=meta["name"])

    async def _write_pod_group(self, job: MPIJob, plan: Plan) -> Refusal | None:
        """Create, patch or delete the job's PodGroup (before any pod); the refusal if refused."""
        write, informer = plan.pod_group, self.caches.pod_groups
        gang_scheduler = self.settings.gang_scheduler
        assert write is not None and informer is not None and gang_scheduler is not None
        resource, namespace = pod_group_resource(gang_scheduler), job.metadata.namespace
        if write.verb == "delete":
            await self._delete_pod_group(job, write.name)
            return None
        if write.verb == "create":  # a name taken by a PodGroup the job does not control is a squatter's
            return await self._create(job, write.body)
        try:
            written = await self.client.patch(resource, namespace, write.name, write.body)
        except ApiError as error:
            if error.invalid:
                return Refusal("PodGroup", write.name, error.status, error.reason, error.message)
            raise
        informer.observe_write(written)
        return None

    async def _delete_pod_group(self, job: MPIJob, name: str) -> None:
        gang_scheduler, informer = self.settings.gang_scheduler, self.caches.pod_groups
        assert gang_scheduler is not None and informer is not None
        namespace = job.metadata.namespace
        await self.client.delete_if_present(pod_group_resource(gang_scheduler), namespace, name)
        informer.observe_delete(f"{namespace}/{name}")

    def _controls(self, job: MPIJob, kind: str, name: str) -> bool:
        cached = self.caches.informer_for(kind).get(f"{job.metadata.namespace}/{name}")
        return cached is not None and names.controlled_by(job, cached)

    async def _delete_pods(self, job: MPIJob, pods: list[podstate.Pod], grace: Mapping[str, int]) -> None:
        """One DELETE collection when it deletes exactly these pods (bulk_delete), else one request each; a pod
        with a grace period of its own (`grace`, by name) always by name."""
        timed = [p for p in pods if podstate.name(p) in grace]
        pods = [p for p in pods if podstate.name(p) not in grace]
        collection = None if self._collections_forbidden or not pods else bulk_delete.collection_for(
            job, pods, self.caches.labelled_pods(job))
        with self.deleting.sending([*timed, *pods]):
            await _each(timed, lambda pod: self._delete_pod(pod, grace[podstate.name(pod)]))
            deleted = None if collection is None else await self._delete_collection(job, collection)
            if deleted is None:
                await _each(pods, self._delete_pod)
                return
            # A pod the apiserver's cache did not list yet goes by name.
            deleted_pods.observe_collection(self.caches.pods, pods, deleted, format_time(self.clock()))
            await _each([p for p in pods if podstate.name(p) not in deleted], self._delete_pod)

    async def _delete_collection(self, job: MPIJob, collection: bulk_delete.Collection) -> set[str] | None:
        """The names of the pods it deleted; None if the operator's role does not grant it (one from before it
        was needed): from then on, pods are deleted one request each."""
        async with self.write_limit:
            try:
                return await self.client.delete_collection(PODS, job.metadata.namespace,
                                                           label_selector=collection.label_selector,
                                                           field_selector=collection.field_selector)
            except ApiError as error:
                if not error.forbidden:
                    raise
                self._collections_forbidden = True
                log.warning("RBAC does not grant deletecollection on pods: deleting pods one request each from now "
                            "on (deploy/'s role grants it)", error=error.message)
                return None

    async def _delete_pod(self, pod: podstate.Pod, grace_seconds: int | None = None) -> None:
        meta = pod["metadata"]
        outcome: JSON | ApiError
        async with self.write_limit:
            try:
                outcome = await self.client.delete(PODS, meta["namespace"], meta["name"], uid=meta.get("uid"),
                                                   grace_period_seconds=grace_seconds)
            except ApiError as error:
                outcome = error
        deleted_pods.observe_by_name(self.caches.pods, pod, outcome, format_time(self.clock()))

    async def _delete_job(self, job: MPIJob) -> None:
        await self.client.delete_if_present(MPIJOBS, job.metadata.namespace, job.metadata.name, uid=job.metadata.uid)
        log.info("deleted finished job (ttlSecondsAfterFinished)", job=job.key)


async def _each(items: Iterable[T], write: Callable[[T], Awaitable[Any]], *,
                stop_on_result: bool = False) -> list[Any]:
    """`write` every item through WRITES_PER_PASS coroutines (not a task per item); results in item order.

    With stop_on_result, no new write starts once one returned something (a refusal): the rest would be too.
    """
    pending = list(enumerate(items))
    results: list[Any] = [None] * len(pending)
    queue = iter(pending)
    stopped = False

    async def worker() -> None:
        nonlocal stopped
        for index, item in queue:
            if stopped:
                return
            results[index] = await write(item)
            stopped = stopped or (stop_on_result and results[index] is not None)

    # all_or_none, not gather: a failed write stops its siblings before the reconcile ends.
    await all_or_none(worker() for _ in range(min(WRITES_PER_PASS, len(pending))))
    return results
