"""What the apiserver answered to each job's last creations that did not succeed, kept until they do.

The next decision sees them in Observed.refused, like pods (policies/refused, policies/squatters): a job of
the same name but another uid (deleted and made again) sees none.
"""

from __future__ import annotations

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Refusal


class Refusals:
    def __init__(self) -> None:
        self._by_job: dict[str, tuple[str | None, list[Refusal]]] = {}  # job key -> (job uid, refusals)

    def of(self, job: MPIJob) -> list[Refusal]:
        found = self._by_job.get(job.key)
        return found[1] if found is not None and found[0] == job.metadata.uid else []

    def remember(self, job: MPIJob, refusals: list[Refusal]) -> bool:
        """Keep this pass's refusals (none: forget); True when they differ from what the decision saw, so the
        job is decided again at once to report (or clear) what the apiserver said."""
        seen = self.of(job)
        if refusals:
            self._by_job[job.key] = (job.metadata.uid, refusals)
        else:
            self._by_job.pop(job.key, None)
        return _what_and_how(refusals) != _what_and_how(seen)

    def forget(self, key: str) -> None:
        self._by_job.pop(key, None)


def _what_and_how(refusals: list[Refusal]) -> set[tuple[str, str, int]]:
    """What was refused and how, not the exact words (a quota's message changes with its usage)."""
    return {(r.kind, r.name, r.code) for r in refusals}
