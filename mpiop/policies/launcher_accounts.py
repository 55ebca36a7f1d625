"""No pod of a job runs as an exec launcher's account: a template naming one fails the job.

Each exec-launched job's launcher runs as `<job>-<uid digits>-launcher` (names.launcher_account_name; before, as
`<job>-launcher`), a ServiceAccount whose Role lets it exec into that job's pods (desired.launcher_rbac). A pod
runs as whatever account its template names, so a tenant allowed only to create MPIJobs could name another job's
launcher account in its own job and exec into that job's pods. Whether an account is some job's cannot be known
from the account in time (the job may be made after this one, whose creation is retried until the account exists),
so the rule is by name, which cannot be raced: no Launcher or Worker template may name an account ending in
`-launcher`, not even an SSH job its own `<job>-launcher` (whatever Role someone bound to that name would come with
it). Under exec launch the launcher's template names no account at all (policies/launch_mode). The job fails,
reason ValidationError, naming the field and the account: retrying cannot help.
"""

from __future__ import annotations

import datetime as dt

from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob
from mpiop.plan import Plan
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status.failed import fail_invalid

# names.launcher_account_name(job) ends so, as did its earlier `<job>-launcher`: every exec launcher's account.
SUFFIX = "-launcher"
# serviceAccount is the deprecated alias the apiserver copies into serviceAccountName when that is empty.
FIELDS = ("serviceAccountName", "serviceAccount")


def error(job: MPIJob) -> str | None:
    """Why a template's account cannot be used, naming the field and the account; None when every one can."""
    for replica_type in (LAUNCHER, WORKER):
        replica = job.spec.mpi_replica_specs.get(replica_type)
        spec = (replica.template.get("spec") or {}) if replica is not None else {}
        for field in FIELDS:
            account = spec.get(field)
            if isinstance(account, str) and account.endswith(SUFFIX):
                return (f"spec.mpiReplicaSpecs.{replica_type}.template.spec.{field}: {account!r} ends in {SUFFIX!r}: "
                        f"accounts so named are reserved for mpiop's exec launchers (MPIJob <job>'s is "
                        f"<job>-<uid digits>{SUFFIX}, before <job>{SUFFIX}), which may exec into their job's pods: "
                        f"name another account")
    return None


def apply(plan: Plan, job: MPIJob, now: dt.datetime) -> Outcome:
    """Failed with ValidationError (STOP), before any object is made, when a template names a reserved account."""
    why = error(job)
    if why is None:
        return CONTINUE
    fail_invalid(plan, job.key, why, now)
    return STOP
