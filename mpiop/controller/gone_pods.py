"""The job's pods that someone else deleted with a DisruptionTarget and that were gone before a pass saw them going.

The scheduler preempts a gang by putting DisruptionTarget on each of its pods and deleting it at once; a pod no
kubelet runs (unbound, or on a simulated node) is then removed within milliseconds, all of them before the job's
next pass (pod events are batched). Without this memory a pass would see the attempt's pods missing, take them for
never made, and make them again into the same attempt (policies/disruption). Kept as the pod cache last held them
(its handler's `old`), by owning job, until the job's attempt has moved past theirs or the job is gone. Lost with
the process: a pod preempted while no operator ran is made again as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import KIND, MPIJob

MAX_PER_JOB = 4096  # bounds the memory of a job that is never reconciled again; more than a gang's pods


def _owner(pod: JSON) -> tuple[str, str] | None:
    """(namespace/name, uid) of the MPIJob that controls the pod."""
    meta = pod["metadata"]
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == KIND and r.get("controller")), None)
    return None if ref is None else (f"{meta.get('namespace')}/{ref.get('name')}", str(ref.get("uid") or ""))


@dataclass
class DisruptedGone:
    _by_job: dict[str, dict[str, JSON]] = field(default_factory=dict)  # job key -> pod uid -> pod as last cached

    def note(self, old: JSON | None, new: JSON | None) -> None:
        """The pod informer's handler: a cached pod that went (not by this operator's own answered DELETE, which
        tells no handler) while it carried DisruptionTarget."""
        if old is None or new is not None or podstate.disruption(old) is None or (owner := _owner(old)) is None:
            return
        kept = self._by_job.setdefault(owner[0], {})
        if len(kept) < MAX_PER_JOB:
            kept[podstate.uid(old) or podstate.name(old)] = old

    def of(self, job: MPIJob) -> list[JSON]:
        """The job's (by uid) pods of its current attempt; those of earlier attempts and of an older job of the same
        name are forgotten."""
        kept = self._by_job.get(job.key)
        if not kept:
            return []
        attempt = job.status.attempt
        for uid, pod in list(kept.items()):
            owner = _owner(pod)
            if podstate.attempt(pod) < attempt or owner is None or owner[1] != job.metadata.uid:
                del kept[uid]
        if not kept:
            del self._by_job[job.key]
        return list(kept.values())

    def forget(self, key: str) -> None:
        """The job is gone."""
        self._by_job.pop(key, None)

    def count(self) -> int:
        return sum(len(kept) for kept in self._by_job.values())
