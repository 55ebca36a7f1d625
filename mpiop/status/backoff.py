"""backoffLimit: which failures count against it, and when a job is past it. The one home of that rule: the
policies that restart or fail an attempt (policies/failure, policies/disruption) and the words that count
containers restarted in place (status.in_place, status.failure_report) all ask `count`.

Counted: every attempt that failed (status.restartCount), less those a disruption ended within
--max-disruption-restarts (status.disruptionRestarts, policies/disruption); the current attempt's container
failures the kubelet restarted in place (restartPolicy OnFailure, status.in_place: a Kubernetes Job counts them
too); and the current attempt itself when this pass fails it. Only a new failure takes a job past the limit (a
failed attempt, or a container restarted in place), so a job whose backoffLimit was lowered under it runs on
until it fails again; an attempt a disruption ended never does.

The count reads the job's status as this pass found it (`job.status`): a pass that ends the attempt says how
through `ending`, before it writes the next attempt's restartCount.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed


class Ending(enum.Enum):
    """How this pass ends the current attempt."""

    NONE = "none"  # it goes on: only its containers restarted in place are new
    FAILED = "failed"  # it failed (a pod, the launcher Job, a stall, a disruption past the cap): one failure more
    DISRUPTED = "disrupted"  # a disruption within --max-disruption-restarts ended it: not counted


@dataclass(frozen=True)
class Count:
    """A job against its backoffLimit."""

    failures: int  # what counts against the limit, this pass's ending included
    in_place: int  # of them, the current attempt's containers restarted in place
    disruptions: int  # attempts a disruption ended (disruptionRestarts), this pass's ending included
    limit: int
    past_limit: bool  # a new failure took the count above the limit: the job fails

    def __str__(self) -> str:
        """`failure 2 of backoffLimit 6`."""
        return f"failure {self.failures} of backoffLimit {self.limit}"


def count(job: MPIJob, observed: Observed, ending: Ending = Ending.NONE) -> Count:
    """The job's failures against backoffLimit once this pass ends its current attempt as `ending` says."""
    status = job.status
    in_place = observed.in_place_failures(status.attempt)
    failures = status.attempt - status.disruptions + in_place + (ending is Ending.FAILED)
    limit = job.spec.run_policy.effective_backoff_limit
    new_failure = ending is Ending.FAILED or (ending is Ending.NONE and in_place > 0)
    return Count(failures, in_place, status.disruptions + (ending is Ending.DISRUPTED), limit,
                 new_failure and failures > limit)
