"""No pod of a job runs as another job's exec launcher account: a template naming one fails the job.

Each exec-launched job's launcher runs as `<job>-launcher`, a ServiceAccount whose Role lets it exec into that
job's pods (desired.launcher_rbac). A pod runs as whatever account its template names, so a tenant allowed only to
create MPIJobs could name `train-launcher` in its own job and exec into job `train`'s pods. Whether an account is
some job's cannot be known from the account in time (job `train` may be made after this one, whose creation is
retried until the account exists), so the rule is by name, which cannot be raced: a Launcher or Worker template
may name an account ending in `-launcher` only when it is this job's own and the job is SSH-launched (mpiop makes
no account for it then: it is the user's). Under exec launch the launcher's template names no account at all
(policies/launch_mode), and no worker runs as the launcher's. The job fails, reason ValidationError, naming the
field and the account: retrying cannot help.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob
from mpiop.desired import launch
from mpiop.plan import MESSAGE_LIMIT, Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import conditions as c
from mpiop.status.failed import mark_failed

# names.launcher_account_name(job) is `<job>-launcher`: every exec launcher's account ends so.
SUFFIX = "-launcher"
# serviceAccount is the deprecated alias the apiserver copies into serviceAccountName when that is empty.
FIELDS = ("serviceAccountName", "serviceAccount")


def error(job: MPIJob, default: launch.LaunchMode) -> str | None:
    """Why a template's account cannot be used, naming the field and the account; None when every one can."""
    own = names.launcher_account_name(job)
    exec_launch = launch.uses_exec(job, default)
    for replica_type in (LAUNCHER, WORKER):
        replica = job.spec.mpi_replica_specs.get(replica_type)
        spec = (replica.template.get("spec") or {}) if replica is not None else {}
        for field in FIELDS:
            account = spec.get(field)
            if not isinstance(account, str) or not account.endswith(SUFFIX) or (account == own and not exec_launch):
                continue
            whose = ("this job's exec launcher account, which only its launcher pod runs as" if account == own else
                     f"MPIJob {account[:-len(SUFFIX)]!r}'s exec launcher account (whether that job exists now or "
                     f"later), which may exec into that job's pods")
            return (f"spec.mpiReplicaSpecs.{replica_type}.template.spec.{field}: {account!r} is {whose}; accounts "
                    f"named <job>{SUFFIX} are reserved for mpiop's exec launchers: name another account")
    return None


def apply(plan: Plan, job: MPIJob, now: dt.datetime, default: launch.LaunchMode = launch.DEFAULT_LAUNCH) -> Outcome:
    """Failed with ValidationError (STOP), before any object is made, when a template names a reserved account."""
    why = error(job, default)
    if why is None:
        return CONTINUE
    mark_failed(plan, c.VALIDATION_ERROR_REASON, f"MPIJob {job.key} has failed: {why}"[:MESSAGE_LIMIT], now)
    return STOP
