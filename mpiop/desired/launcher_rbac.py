"""What an exec launcher may do, as objects the job owns: its ServiceAccount, a Role and the RoleBinding.

The Role names its pods one by one (`resourceNames`): the launcher's token can read and exec into this job's
workers (and its own pod when it also works) and nothing else, not another job's pods in the same namespace.
`pods/exec` is granted for `create` (SPDY, and the check every WebSocket exec gets from Kubernetes 1.35) and
`get` (kubectl 1.31+ opens exec over a WebSocket, a GET, which a 1.34 apiserver authorizes as `get`).
`get` on the pods: kubectl reads the pod before it execs. The Role follows the job: a new attempt of a job
whose launcher works renames the launcher, and Worker.replicas may change.
"""

from __future__ import annotations

from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIJob

RBAC_API = "rbac.authorization.k8s.io"


def exec_targets(job: MPIJob, attempt: int) -> list[str]:
    """The pods mpirun starts ranks in: every worker, and the attempt's launcher when it also works."""
    workers = [names.worker_name(job, i) for i in range(job.spec.worker_replicas)]
    return ([names.launcher_name(job, attempt)] if job.spec.run_launcher_as_worker else []) + workers


def service_account(job: MPIJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": names.owned_metadata(job, names.launcher_account_name(job), names.supporting_labels(job)),
    }


def role_rules(job: MPIJob, attempt: int) -> list[dict[str, Any]]:
    targets = exec_targets(job, attempt)
    return [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": targets, "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": targets, "verbs": ["create", "get"]},
    ]


def role(job: MPIJob, attempt: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": names.owned_metadata(job, names.launcher_account_name(job), names.supporting_labels(job)),
        "rules": role_rules(job, attempt),
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
