"""A worker whose GPUs come through DRA claims: its slots are known before its hostfile is written, or the job
waits or fails saying why.

desired.gpus counts a worker's GPUs: its GPU limits plus the devices its claims request from the GPU device classes
(--gpu-device-classes), read from the ResourceClaimTemplates the controller caches. Two cases leave no count:

    a template the job names is not in the cache  -> the job waits, Running=False ResourceClaimTemplateMissing and a
                                                     Warning naming it; the template's arrival queues the job again
    a count known only once allocated (All, or     -> Failed ValidationError naming spec.slotsPerWorker: guessing would
    firstAvailable alternatives that differ)          write a hostfile with the wrong ranks

Both only until the job's hostfile is written: from then on, should its template go or change so, the slots are the
hostfile's, those its pods were made with, and the job goes on (a running job stalled by a deleted template would
not even see its own success). A template changed to another count changes the slots, as a changed GPU limit would.
A job with no claims from a GPU device class is not concerned.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import gpus, hostfile
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import fail_invalid

WAITING = "ResourceClaimTemplateMissing"
FOUND = "ResourceClaimTemplateFound"


def resolve(job: MPIJob, observed: Observed, classes: frozenset[str]) -> int | gpus.Unresolved:
    """The job's slots per worker from its limits and claims; once its hostfile exists and they cannot be counted,
    the hostfile's."""
    found = gpus.slots_per_worker(job, observed.claim_templates, classes)
    if isinstance(found, int):
        return found
    written = hostfile.written_slots(((observed.config_map or {}).get("data") or {}).get(names.HOSTFILE_NAME) or "")
    return written if written is not None else found


def apply(plan: Plan, job: MPIJob, slots: int | gpus.Unresolved, now: dt.datetime) -> Outcome:
    """STOP while a ResourceClaimTemplate is awaited (Running=False) or when slotsPerWorker is needed (Failed)."""
    running = plan.status.condition("Running")
    if isinstance(slots, int):
        if running is not None and running.reason == WAITING:
            c.set_condition(plan.status, "Running", "False", FOUND,
                            f"MPIJob {job.key}: {slots} slots per worker, from its claims", now)
        return CONTINUE
    if not slots.waiting:
        fail_invalid(plan, job.key, slots.message, now)
        return STOP
    message = f"MPIJob {job.key} waits: {slots.message}"[:MESSAGE_LIMIT]
    c.set_condition(plan.status, "Running", "False", WAITING, message, now)
    if running is None or running.reason != WAITING or running.message != message:
        plan.event("Warning", WAITING, message)
    return STOP
