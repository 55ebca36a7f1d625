"""launcherCreationPolicy: when the launcher pod may be created.

AtStartup (the default) creates it at once, before the workers; WaitForWorkersReady holds it until every worker of
the current attempt is Ready, so mpirun never starts against a worker whose sshd is not listening yet.

Under exec launch the launcher also waits, whatever the policy, until its Role (as cached: written, not only
planned) names every wanted worker: the Role names a pod only once it exists and the job controls it
(desired.launcher_rbac), so the launcher starts with every worker reachable rather than being refused its first
exec. And only once its ServiceAccount, Role and RoleBinding are all seen as the job's own: never as an account,
nor under a binding, that someone else made.
"""

from __future__ import annotations

from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launcher_rbac
from mpiop.plan import Observed


def launcher_may_start(job: MPIJob, observed: Observed, attempt: int, exec_launch: bool = False) -> bool:
    if exec_launch and not (launcher_rbac.access_is_own(job, observed)
                            and set(launcher_rbac.worker_names(job)) <= launcher_rbac.named_pods(observed.role)):
        return False
    if job.spec.effective_launcher_creation_policy == "AtStartup":
        return True
    return observed.workers_all(job, attempt, lambda s: s.ready)
