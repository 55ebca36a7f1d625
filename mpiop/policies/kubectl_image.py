"""An exec launcher whose kubectl image the kubelet cannot pull says so on its MPIJob, and fails the job when the
image is still not there a while after the launcher was made.

The launcher's init container copies kubectl out of `--kubectl-image` (desired.kubexec). When that image cannot be
pulled, the pod alone would sit in Init:ImagePullBackOff with nothing on the job. The image is the operator's
setting, not the job's, and a registry can come back, so the job first waits, Running=False naming the image and
the flag (a Warning Event once); after PULL_GRACE from the launcher's creation it fails with the same reason,
rather than hold its workers forever. A new attempt would pull the same image: the job does not restart for it.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launch
from mpiop.desired.kubexec import DELIVERY_CONTAINER
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from mpiop.policies.failure import mark_failed
from mpiop.status import conditions as c

REASON = "KubectlImageUnavailable"
PULL_GRACE = dt.timedelta(minutes=5)


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, default: launch.LaunchMode,
          kubectl_image: str) -> bool:
    """Failed (True) when the current launcher's kubectl image has not been pulled PULL_GRACE after the launcher
    was made; before that, Running=False saying why the job waits."""
    if not launch.uses_exec(job, default):
        return False
    launcher = observed.launcher(job, plan.status.restart_count or 0)
    failure = podstate.image_pull_failure(launcher, DELIVERY_CONTAINER) if launcher is not None else None
    if launcher is None or failure is None:
        return False
    reason, detail = failure
    why = (f"the launcher {podstate.name(launcher)} cannot get kubectl: image {kubectl_image!r} (the operator's "
           f"--kubectl-image) is not pulled: {reason}" + (f": {detail}" if detail else ""))
    created = launcher["metadata"].get("creationTimestamp")
    waited = now - dt.datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else dt.timedelta()
    if waited >= PULL_GRACE:
        minutes = int(PULL_GRACE.total_seconds() // 60)
        message = f"MPIJob {job.key} has failed: {why}; still not pulled after {minutes} minutes"
        mark_failed(plan, REASON, message[:MESSAGE_LIMIT], now)
        return True
    plan.requeue_in((PULL_GRACE - waited).total_seconds())  # the pod may not change again before then
    running = plan.status.condition("Running")
    message = f"MPIJob {job.key} waits: {why}"[:MESSAGE_LIMIT]
    c.set_condition(plan.status, "Running", "False", REASON, message, now)
    if running is None or running.reason != REASON:
        plan.event("Warning", REASON, message)
    return False
