"""Soft writes: which of a pass's writes may wait, and for how long (pure; the caller passes the clock).

A soft write changes only replica counts in status or the hostfile ConfigMap's discover_hosts.sh as workers
come and go. A pass whose writes are all soft waits up to SOFT_WRITE_DELAY for a real transition to ride along
with, so a job's pods turning Running one by one cost one status write and one ConfigMap patch, not one each.
Creations, deletions, Events, condition or time changes and a changed hostfile (on the host network the
launcher waits for its ports) are transitions and are made at once.

One transition waits too: a suspended job's first status (Created, Suspended). A client written against
kubeflow's operator, which is slower to write it, creates a suspended job and updates its spec (resumes it)
from the create response without reading it again; a status written meanwhile changes the resourceVersion
and that update fails with 409 Conflict. A suspended job has nothing urgent to report, so its first pass is
held like a soft one; the resume, or the delay running out, makes the pass write. So is a pass that lays out a
job of total GPUs, on purpose: under Kueue (v0.17.0, tests/integration/test_kueue.py) a layout written at once
lands while Kueue admits the Workload it made of the job as written, updates that Workload in place, and its
scheduler admits the old pod sets (1 worker, no GPU) for the job that runs 16 GPUs, for good; landing after Kueue
resumed the job as written, it makes Kueue stop the job and remake its Workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import JobStatus, MPIJob
from mpiop.plan import Plan
from mpiop.policies.suspend import is_suspended

SOFT_WRITE_DELAY = 5.0


@dataclass(frozen=True)
class StatusChange:
    """What a plan changes in the job's status, read once a pass (dumping a status is a fair share of one)."""

    patch: JSON | None  # a merge patch turning the old status into the new (cleared fields null); None: they agree
    fields: frozenset[str]  # the top-level fields that differ (lastReconcileTime aside)


def status_change(old: JobStatus, new: JobStatus) -> StatusChange:
    if old == new:  # most passes change nothing: two models compare for less than two dumps cost
        return StatusChange(None, frozenset())
    old_json, new_json = old.to_json(), new.to_json()
    old_json.pop("lastReconcileTime", None)
    new_json.pop("lastReconcileTime", None)
    fields = frozenset(k for k in old_json.keys() | new_json.keys() if old_json.get(k) != new_json.get(k))
    if not fields:
        return StatusChange(None, fields)
    patch: JSON = {k: None for k in old_json if k not in new_json}
    patch.update(new_json)
    return StatusChange(patch, fields)


def only_soft_writes(plan: Plan, status: StatusChange, config_map: JSON | None = None) -> bool:
    """Whether this plan's writes are all soft (and there is at least one)."""
    if (plan.objects_to_create or plan.pods_to_delete or plan.events or plan.create_ssh_secret or plan.delete_mpijob
            or plan.launcher_batch_job_to_delete is not None or plan.pod_group is not None or plan.stale_pod_groups
            or plan.mpijob_patch is not None):
        return False
    cached = (config_map or {}).get("data") or {}
    for obj in plan.objects_to_update:
        if obj["kind"] != "ConfigMap":  # a Role's rules (exec launch) are a transition
            return False
        changed = {k for k in obj["data"].keys() | cached.keys() if obj["data"].get(k) != cached.get(k)}
        if not changed <= {names.DISCOVER_HOSTS_NAME}:
            return False
    return status.fields <= {"replicaStatuses"} and bool(status.fields or plan.objects_to_update)


def suspended_first_status(job: MPIJob) -> bool:
    """Whether this pass would write the first status of a job created suspended (see the module's docstring)."""
    return is_suspended(job) and not job.status.conditions


def may_wait(job: MPIJob, plan: Plan, status: StatusChange, config_map: JSON | None = None) -> bool:
    """Whether this pass's writes may be held back: all soft, or a suspended job's first status."""
    return suspended_first_status(job) or only_soft_writes(plan, status, config_map)


@dataclass
class SoftWriteHold:
    """Per job, since when its soft writes have been waiting; `now` is any monotonic clock's seconds."""

    delay: float = SOFT_WRITE_DELAY
    _since: dict[str, float] = field(default_factory=dict)

    def wait(self, key: str, soft: bool, now: float) -> float | None:
        """Seconds to hold this pass's writes back, or None to write now (they are not all soft, or waited
        long enough: then the next soft write waits afresh)."""
        if not soft:
            self._since.pop(key, None)
            return None
        left = self._since.setdefault(key, now) + self.delay - now
        if left > 0:
            return left
        del self._since[key]
        return None

    def forget(self, key: str) -> None:
        self._since.pop(key, None)

    def held(self) -> int:
        """Jobs whose soft writes are waiting now (each is written by its next pass, within `delay`)."""
        return len(self._since)
