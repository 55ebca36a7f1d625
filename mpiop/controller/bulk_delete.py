"""When a pass's pod deletions can go as one DELETE collection instead of one request per pod.

Pure: given the pods a plan deletes and the cached pods the collection's selectors would match, the
selectors, or None. A collection is used only when it would delete exactly the planned pods (those already
being deleted aside: deleting them again changes nothing) and every pod it matches is controlled by the job,
so no other owner's pod carrying the job's labels goes with them. A finished job's workers (cleanPodPolicy)
and a restart's whole attempt are the usual cases: 8 workers are 1 request instead of 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob

# Pending, Running and Unknown: the phases podstate.is_active counts, as a field selector.
ACTIVE_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Collection:
    label_selector: str
    field_selector: str | None


def collection_for(job: MPIJob, to_delete: Sequence[podstate.Pod],
                   labelled: Sequence[podstate.Pod]) -> Collection | None:
    """`labelled`: the cached pods carrying the job's labels (whoever owns them)."""
    if len(to_delete) < 2:
        return None
    wanted = {podstate.name(p) for p in to_delete}
    for field_selector in (ACTIVE_FIELD_SELECTOR, None):
        matched = [p for p in labelled if field_selector is None or podstate.phase(p) not in _TERMINAL]
        if not all(names.controlled_by(job, p) for p in matched):
            return None  # a pod someone else owns carries the job's labels: one by one, by name
        if {podstate.name(p) for p in matched if not podstate.is_terminating(p)} == wanted:
            return Collection(names.selector_string(job), field_selector)
    return None
