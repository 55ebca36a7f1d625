"""An exec launcher whose kubectl image the kubelet cannot pull says so on its MPIJob, and fails the job when the
image is still not there a while after the launcher was made.

The launcher's init container copies kubectl out of `--kubectl-image` (desired.kubexec). When that image cannot be
pulled, the pod alone would sit in Init:ImagePullBackOff with nothing on the job. The image is the operator's
setting, not the job's, and a registry can come back, so the job first waits, Running=False naming the image and
the flag (a Warning Event once); --kubectl-image-grace-seconds after the launcher was made it fails with the same
reason, rather than hold its workers forever. A new attempt would pull the same image: the job does not restart
for it.
"""

from __future__ import annotations

import datetime as dt

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launch
from mpiop.desired.kubexec import DELIVERY_CONTAINER
from mpiop.desired.settings import Settings
from mpiop.plan import MESSAGE_LIMIT, Observed, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import mark_failed

REASON = "KubectlImageUnavailable"


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime, settings: Settings) -> Outcome:
    """Failed (STOP) when the current launcher's kubectl image is still not pulled the grace after the launcher
    was made; before that, Running=False saying why the job waits."""
    if not launch.uses_exec(job, settings.default_launch):
        return CONTINUE
    launcher = observed.launcher(job, plan.status.attempt)
    failure = podstate.image_pull_failure(launcher, DELIVERY_CONTAINER) if launcher is not None else None
    if launcher is None or failure is None:
        return CONTINUE
    reason, detail = failure
    why = (f"the launcher {podstate.name(launcher)} cannot get kubectl: image {settings.kubectl_image!r} (the "
           f"operator's --kubectl-image) is not pulled: {reason}" + (f": {detail}" if detail else ""))
    created = launcher["metadata"].get("creationTimestamp")
    waited = now - dt.datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else dt.timedelta()
    grace = dt.timedelta(seconds=settings.kubectl_image_grace_seconds)
    if waited >= grace:
        message = (f"MPIJob {job.key} has failed: {why}; still not pulled after {_duration(grace)} (the operator's "
                   "--kubectl-image-grace-seconds)")
        mark_failed(plan, REASON, message[:MESSAGE_LIMIT], now)
        return STOP
    plan.requeue_in((grace - waited).total_seconds())  # the pod may not change again before then
    running = plan.status.condition("Running")
    message = f"MPIJob {job.key} waits: {why}"[:MESSAGE_LIMIT]
    c.set_condition(plan.status, "Running", "False", REASON, message, now)
    if running is None or running.reason != REASON:
        plan.event("Warning", REASON, message)
    return CONTINUE


def _duration(grace: dt.timedelta) -> str:
    """`5 minutes`, `1 minute`, `90 seconds`: whole minutes read as minutes."""
    seconds = int(grace.total_seconds())
    if seconds and seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute" + ("s" if minutes != 1 else "")
    return f"{seconds} second" + ("s" if seconds != 1 else "")
