"""How mpirun reaches the workers: over SSH (kubeflow's way, sshd in every worker) or through the Kubernetes
exec API (`kubectl exec` as mpirun's remote agent: no sshd, any UID, no SSH key).

Per job by the annotation `mpiop.kubeflow.org/launch: ssh|exec` (the spec stays kubeflow's v2beta1, whose
operator ignores it); a job without it gets the operator's `--default-launch`.
"""

from __future__ import annotations

from typing import Literal

from mpiop.api.v2beta1 import MPIJob
from mpiop.names import LAUNCH_ANNOTATION

LaunchMode = Literal["ssh", "exec"]
LAUNCH_MODES: tuple[LaunchMode, ...] = ("ssh", "exec")
DEFAULT_LAUNCH: LaunchMode = "ssh"  # --default-launch's default: kubeflow's way
# The kubectl an exec launcher's init container copies (with sh and cp: desired.kubexec says why not upstream's
# distroless registry.k8s.io/kubectl), for the supported minor, pinned.
DEFAULT_KUBECTL_IMAGE = "docker.io/alpine/k8s:1.34.1"


def annotated(job: MPIJob) -> str | None:
    """The annotation's value as written, or None when the job has none."""
    value = job.metadata.annotations.get(LAUNCH_ANNOTATION)
    return None if value is None else str(value)


def annotation_error(job: MPIJob) -> str | None:
    """Why the annotation cannot be used, naming it; None when it is absent or valid."""
    value = annotated(job)
    if value is None or value in LAUNCH_MODES:
        return None
    return (f"metadata.annotations[{LAUNCH_ANNOTATION}]: {value!r} is not one of "
            f"{', '.join(repr(m) for m in LAUNCH_MODES)}")


def mode(job: MPIJob, default: LaunchMode) -> LaunchMode:
    """The job's launch mode: its annotation when valid, else the operator's default."""
    value = annotated(job)
    return value if value in LAUNCH_MODES else default


def uses_exec(job: MPIJob, default: LaunchMode) -> bool:
    return mode(job, default) == "exec"


def exec_template_error(job: MPIJob, default: LaunchMode) -> str | None:
    """Under exec launch, why the launcher's template cannot be used, naming the field; None when it can.

    The launcher must run as the job's own account (its Role is bound to that one only) with its token mounted:
    a template naming another account, or turning the token off, is refused rather than silently overridden.
    """
    if mode(job, default) != "exec" or job.spec.launcher is None:
        return None
    spec = job.spec.launcher.template.get("spec") or {}
    path = "spec.mpiReplicaSpecs.Launcher.template.spec"
    for field in ("serviceAccountName", "serviceAccount"):
        if spec.get(field):
            return (f"{path}.{field}: {spec[field]!r} cannot be used with {LAUNCH_ANNOTATION}: exec; the launcher "
                    f"runs as {job.metadata.name}-launcher, the only account allowed to exec into this job's pods")
    if spec.get("automountServiceAccountToken") is False:
        return (f"{path}.automountServiceAccountToken: false cannot be used with {LAUNCH_ANNOTATION}: exec; the "
                "launcher's token is what starts the ranks")
    return None
