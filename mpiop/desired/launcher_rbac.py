"""What an exec launcher may do, as objects the job owns: its ServiceAccount, a Role and the RoleBinding.

The Role names pods one by one (`resourceNames`), and only pods that exist and this job controls: its launcher's
token can read and exec into this job's workers of the current attempt (and its own pod when it also works) once
each exists, and nothing else. A name is never granted ahead of its pod: RBAC grants by name, and a pod of that
name made by anyone else (a PyTorchJob's `train-worker-0`, a squatter) would be covered. So while the job is
suspended, or before its first pod, the Role grants nothing (no rule: a rule with no `resourceNames` would grant
every pod). The launcher is made only once the Role names every worker (policies/launcher_creation); a working
launcher is named once it exists (its kubexec.sh waits for the pods it starts ranks in to be readable).
`pods/exec` is granted for `create` (SPDY, and the check every WebSocket exec gets from Kubernetes 1.35) and
`get` (kubectl 1.31+ opens exec over a WebSocket, a GET, which a 1.34 apiserver authorizes as `get`).
`get` on the pods: kubectl reads the pod before it execs.

No deputy: the RoleBinding is made only once the ServiceAccount and Role are seen as the job's own (an account or
Role of that name another made, say an admin's Role granting `list secrets`, is never bound), and the names carry
the job's uid (names.launcher_account_name), so none can be made, nor bound elsewhere, before the job exists.
"""

from __future__ import annotations

from typing import Any

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed

RBAC_API = "rbac.authorization.k8s.io"


def exec_targets(job: MPIJob, observed: Observed, attempt: int) -> list[str]:
    """The pods mpirun starts ranks in that exist now, are not being deleted, and the job controls (its uid in their
    controller reference: the caches hold only those, checked again here as it is the whole point): the attempt's
    workers below the wanted count, and the attempt's launcher when it also works, launcher first. A terminating
    pod is dropped at once, not once it is gone: its name may be taken by anyone as soon as it is."""
    launcher = observed.launcher(job, attempt) if job.spec.run_launcher_as_worker else None
    workers = observed.workers(job, attempt)
    pods = ([launcher] if launcher is not None else []) + [workers[i] for i in sorted(workers)
                                                           if i < job.spec.worker_replicas]
    return [podstate.name(pod) for pod in pods if names.controlled_by(job, pod) and not podstate.is_terminating(pod)]


def own(job: MPIJob, obj: JSON | None) -> JSON | None:
    """`obj` if this job controls it (its uid), else None: an account, Role or RoleBinding of the launcher's name
    that another made is never used, bound or bound to (the caches hold only the job's own; checked again here)."""
    return obj if obj is not None and names.controlled_by(job, obj) else None


def access_is_own(job: MPIJob, observed: Observed) -> bool:
    """The ServiceAccount, Role and RoleBinding are all seen in the cache as this job's: only then may its launcher
    run as the account (policies/launcher_creation)."""
    return all(own(job, obj) is not None for obj in (observed.service_account, observed.role, observed.role_binding))


def worker_names(job: MPIJob) -> list[str]:
    """Every wanted worker's name: what the Role must name before the launcher is made."""
    return [names.worker_name(job, i) for i in range(job.spec.worker_replicas)]


def named_pods(role: JSON | None) -> set[str]:
    """The pods a Role (as cached) lets its account exec into."""
    return set(granted(role))


def granted(role: JSON | None) -> list[str]:
    """The pods a Role lets its account exec into, in its order."""
    return [name for rule in (role or {}).get("rules") or [] if "pods/exec" in rule.get("resources", [])
            for name in rule.get("resourceNames") or []]


def service_account(job: MPIJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": names.owned_metadata(job, names.launcher_account_name(job), names.supporting_labels(job)),
    }


def role_rules(targets: list[str]) -> list[dict[str, Any]]:
    """The rules granting exactly `targets`; none when there is none (an empty resourceNames means every pod)."""
    if not targets:
        return []
    return [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": list(targets), "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": list(targets), "verbs": ["create", "get"]},
    ]


def role(job: MPIJob, targets: list[str], name: str | None = None) -> dict[str, Any]:
    """The launcher's Role (or, `name` given, the one of that name: a job's legacy Role, desired.ensure)."""
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": names.owned_metadata(job, name or names.launcher_account_name(job), names.supporting_labels(job)),
        "rules": role_rules(targets),
    }


def role_binding(job: MPIJob) -> dict[str, Any]:
    name = names.launcher_account_name(job)
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": names.owned_metadata(job, name, names.supporting_labels(job)),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.metadata.namespace}],
    }
