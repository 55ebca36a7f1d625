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
"""

from __future__ import annotations

from typing import Any

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed

RBAC_API = "rbac.authorization.k8s.io"


def exec_targets(job: MPIJob, observed: Observed, attempt: int) -> list[str]:
    """The pods mpirun starts ranks in that exist now and the job controls (its uid in their controller reference:
    the caches hold only those, checked again here as it is the whole point): the attempt's workers below the
    wanted count, and the attempt's launcher when it also works, launcher first."""
    launcher = observed.launcher(job, attempt) if job.spec.run_launcher_as_worker else None
    workers = observed.workers(job, attempt)
    pods = ([launcher] if launcher is not None else []) + [workers[i] for i in sorted(workers)
                                                           if i < job.spec.worker_replicas]
    return [podstate.name(pod) for pod in pods if names.controlled_by(job, pod)]


def worker_names(job: MPIJob) -> list[str]:
    """Every wanted worker's name: what the Role must name before the launcher is made."""
    return [names.worker_name(job, i) for i in range(job.spec.worker_replicas)]


def named_pods(role: JSON | None) -> set[str]:
    """The pods a Role (as cached) lets its account exec into."""
    return {name for rule in (role or {}).get("rules") or [] if "pods/exec" in rule.get("resources", [])
            for name in rule.get("resourceNames") or []}


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


def role(job: MPIJob, targets: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": names.owned_metadata(job, names.launcher_account_name(job), names.supporting_labels(job)),
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
