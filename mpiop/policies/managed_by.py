"""runPolicy.managedBy: jobs that name another controller (e.g. Kueue's MultiKueue) are left alone."""

from __future__ import annotations

from mpiop.api.v2beta1 import MPIJob

KUBEFLOW_CONTROLLER = "kubeflow.org/mpi-operator"


def is_ours(job: MPIJob) -> bool:
    return job.spec.run_policy.managed_by in (None, "", KUBEFLOW_CONTROLLER)
