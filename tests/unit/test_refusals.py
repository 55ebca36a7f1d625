"""mpiop.controller.refusals: a pass's refusals reach the next decision of the same job (same uid) only, and a
change in what was refused, or how, has the job decided again at once."""

from __future__ import annotations

from mpiop.controller.refusals import Refusals
from mpiop.plan import Refusal
from testkit.mpijobs import make_mpijob

JOB = make_mpijob("pi", "ns").obj()
QUOTA = Refusal("Pod", "pi-worker-0", 403, "Forbidden", "exceeded quota: used 1")
QUOTA_LATER = Refusal("Pod", "pi-worker-0", 403, "Forbidden", "exceeded quota: used 2")
TAKEN = Refusal("Service", "pi", 409, "AlreadyExists", "services \"pi\" already exists")


def test_remembered_for_the_same_job_only() -> None:
    refusals = Refusals()
    assert refusals.remember(JOB, [QUOTA]) is True
    assert refusals.of(JOB) == [QUOTA]
    again = JOB.model_copy(deep=True)
    again.metadata.uid = "another-uid"  # deleted and made again under the same name
    assert refusals.of(again) == []
    refusals.forget(JOB.key)
    assert refusals.of(JOB) == []


def test_decided_again_at_once_only_when_what_or_how_changed() -> None:
    refusals = Refusals()
    refusals.remember(JOB, [QUOTA])
    assert refusals.remember(JOB, [QUOTA_LATER]) is False  # the same refusal in other words
    assert refusals.remember(JOB, [QUOTA_LATER, TAKEN]) is True
    assert refusals.remember(JOB, []) is True  # all created now: the next pass clears the report
    assert refusals.of(JOB) == []
    assert refusals.remember(JOB, []) is False
