"""launcherCreationPolicy: when the launcher pod may be created.

AtStartup (the default) creates it at once, before the workers; WaitForWorkersReady holds it until every worker of
the current attempt is Ready, so mpirun never starts against a worker whose sshd is not listening yet.
"""

from __future__ import annotations

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed


def launcher_may_start(job: MPIJob, observed: Observed, attempt: int) -> bool:
    if job.spec.effective_launcher_creation_policy == "AtStartup":
        return True
    return observed.workers_all(job, attempt, lambda s: s.ready)
