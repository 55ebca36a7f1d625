"""mpiop.policies.managed_by: jobs naming another controller are left alone."""

from __future__ import annotations

import pytest

from mpiop.policies.managed_by import is_ours
from testkit.mpijobs import make_mpijob


@pytest.mark.parametrize(
    ("managed_by", "ours"),
    [
        (None, True),
        ("", True),
        ("kubeflow.org/mpi-operator", True),
        ("kueue.x-k8s.io/multikueue", False),
        ("kubeflow.org/mpi-operator-v2", False),
        ("Kubeflow.org/mpi-operator", False),
    ],
    ids=["unset", "empty", "kubeflow", "multikueue", "prefix-only", "case-sensitive"],
)
def test_is_ours(managed_by: str | None, ours: bool) -> None:
    builder = make_mpijob("pi")
    if managed_by is not None:
        builder.managed_by(managed_by)
    assert is_ours(builder.obj()) is ours
