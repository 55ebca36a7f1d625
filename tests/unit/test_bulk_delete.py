"""mpiop.controller.bulk_delete: one DELETE collection only when it deletes exactly the planned pods."""

from __future__ import annotations

import pytest

from mpiop import podstate
from mpiop.controller.bulk_delete import ACTIVE_FIELD_SELECTOR, Collection, collection_for
from mpiop.controller.trims import trim_pod
from mpiop.policies import cleanup
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod

JOB = make_mpijob("pi").workers(3).obj()
LABELS = "training.kubeflow.org/job-name=pi,training.kubeflow.org/operator-name=mpi-operator"
LAUNCHER_DONE = make_pod(JOB, "launcher").succeeded().obj()
RUNNING = [make_pod(JOB, "worker", i).running().obj() for i in range(3)]
PENDING_2 = make_pod(JOB, "worker", 2).obj()
FAILED_2 = make_pod(JOB, "worker", 2).failed().obj()
GOING_2 = make_pod(JOB, "worker", 2).running().terminating().obj()
SQUATTER = make_pod(JOB, "worker", 9).running().obj()
SQUATTER["metadata"]["ownerReferences"] = []
FINISHED_SQUATTER = make_pod(JOB, "worker", 9).succeeded().obj()
FINISHED_SQUATTER["metadata"]["ownerReferences"] = []


def _active(pods: list[podstate.Pod]) -> list[podstate.Pod]:
    return cleanup.pods_to_delete("Running", pods)


CASES = [
    # (to delete, the cached pods carrying the job's labels, the collection or None)
    (_active([LAUNCHER_DONE, *RUNNING]), [LAUNCHER_DONE, *RUNNING], Collection(LABELS, ACTIVE_FIELD_SELECTOR)),
    (_active([LAUNCHER_DONE, *RUNNING[:2], PENDING_2]), [LAUNCHER_DONE, *RUNNING[:2], PENDING_2],
     Collection(LABELS, ACTIVE_FIELD_SELECTOR)),
    (_active([LAUNCHER_DONE, *RUNNING[:2], GOING_2]), [LAUNCHER_DONE, *RUNNING[:2], GOING_2],
     Collection(LABELS, ACTIVE_FIELD_SELECTOR)),
    (cleanup.pods_to_delete("All", [LAUNCHER_DONE, *RUNNING[:2], FAILED_2]), [LAUNCHER_DONE, *RUNNING[:2], FAILED_2],
     Collection(LABELS, None)),
    (RUNNING[:2], [LAUNCHER_DONE, *RUNNING], None),
    (RUNNING[:1], [LAUNCHER_DONE, *RUNNING[:1]], None),
    (RUNNING, [LAUNCHER_DONE, *RUNNING, SQUATTER], None),
    (RUNNING, [LAUNCHER_DONE, *RUNNING, FINISHED_SQUATTER], Collection(LABELS, ACTIVE_FIELD_SELECTOR)),
    (cleanup.pods_to_delete("All", [LAUNCHER_DONE, *RUNNING]), [LAUNCHER_DONE, *RUNNING, FINISHED_SQUATTER], None),
    (RUNNING, RUNNING[:2], None),
]


@pytest.mark.parametrize(("to_delete", "labelled", "expected"), CASES, ids=[
    "finished-job-active-workers", "pending-worker-too", "one-already-going-is-deleted-again-harmlessly",
    "clean-all-no-field-selector", "a-subset-of-the-active-pods-one-by-one", "a-single-pod-by-name",
    "someone-elses-pod-with-the-jobs-labels", "someone-elses-finished-pod-is-not-matched-by-the-phase",
    "clean-all-would-match-someone-elses-pod", "the-cache-lacks-one-of-them",
])
def test_collection_for(to_delete: list[podstate.Pod], labelled: list[podstate.Pod],
                        expected: Collection | None) -> None:
    assert collection_for(JOB, to_delete, labelled) == expected


def test_marked_terminating_is_what_the_next_pass_leaves_alone() -> None:
    marked = trim_pod(podstate.marked_terminating(RUNNING[0], "2026-11-23T00:00:00Z"))
    assert podstate.is_terminating(marked) and not podstate.is_active(marked)
    assert not podstate.is_terminating(RUNNING[0])
