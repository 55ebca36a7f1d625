"""Which watched objects the owned caches keep: only those an MPIJob controls, under a name that job's objects have.

The owned informers select by kubeflow's operator-name label, which anyone who may create a ConfigMap can write:
selected by the label alone, twenty labelled ConfigMaps of 700 KB in a namespace with no MPIJob grew the leader
by 134 MB, and every restart listed them again (issue 60). Now an object is kept only if its controller reference
is to a kubeflow.org MPIJob and its name is one of that job's (names.py): its hostfile ConfigMap and saved attempts,
its Secret, Service, pods, launcher Job, PodGroup (Kubernetes' gangs: one per attempt) and launcher ServiceAccount,
Role and RoleBinding. A pod of kubeflow's launcher Job is controlled by that Job instead, and carries the job's name
label. Anything else is dropped before it is trimmed, whatever it carries; what a tenant can still make the caches
hold is one object of each name per MPIJob name, trimmed (controller/trims.py), for as long as the garbage collector
leaves an object whose owner does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import GROUP, KIND
from mpiop.desired import podgroup

# Each kind's names, as what follows the controlling job's name: names.py's functions, which
# tests/unit/test_cache_acceptance.py checks these against. Exec launch's ServiceAccount, Role and RoleBinding are
# named from the job's uid too (names.launcher_account_name_for, checked in `accept`), or `<job>-launcher` for a job
# started before that (names.legacy_launcher_account_name).
_LAUNCHER_ACCOUNT = re.compile(r"-launcher")
_UID_NAMED = frozenset({"ServiceAccount", "Role", "RoleBinding"})
_NAMES_BY_KIND: dict[str, re.Pattern[str]] = {
    "ConfigMap": re.compile(r"-config|-attempt-[0-9]+"),
    "Secret": re.compile(r"-ssh"),
    "Service": re.compile(r""),
    "Pod": re.compile(r"-worker-[0-9]+|-launcher(?:-[0-9]+)?"),
    "Job": re.compile(r"-launcher"),  # kubeflow's launcher batch/v1 Job
    podgroup.KIND: re.compile(r"(?:-[0-9]+)?"),  # Kubernetes' gangs: one per attempt (names.attempt_pod_group_name)
    "ServiceAccount": _LAUNCHER_ACCOUNT,
    "Role": _LAUNCHER_ACCOUNT,
    "RoleBinding": _LAUNCHER_ACCOUNT,
}
# A pod kubeflow's launcher Job made: `<job>-launcher-<random suffix>` (the Job's generateName).
_BATCH_JOB_POD = re.compile(r"-launcher-[a-z0-9]+")


def _controller(obj: JSON) -> JSON | None:
    return next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def _named_for(suffix: re.Pattern[str], job: object, name: object) -> bool:
    """`name` is `job` followed by what `suffix` matches."""
    return (isinstance(job, str) and bool(job) and isinstance(name, str) and name.startswith(job)
            and suffix.fullmatch(name, len(job)) is not None)


def accepts(kind: str) -> Callable[[JSON], bool]:
    """The informer's `accept` for one owned kind: an object an MPIJob controls, named as that job's are."""
    suffix = _NAMES_BY_KIND[kind]

    def accept(obj: JSON) -> bool:
        controller = _controller(obj)
        if controller is None:
            return False
        name = obj["metadata"].get("name")
        if controller.get("kind") == KIND and str(controller.get("apiVersion") or "").startswith(f"{GROUP}/"):
            job, uid = controller.get("name"), controller.get("uid")
            if kind in _UID_NAMED and isinstance(job, str) and isinstance(uid, str) \
                    and name == names.launcher_account_name_for(job, uid):
                return True
            return _named_for(suffix, job, name)
        return kind == "Pod" and controller.get("kind") == "Job" and _named_for(
            _BATCH_JOB_POD, (obj["metadata"].get("labels") or {}).get(names.JOB_NAME_LABEL), name)

    return accept
