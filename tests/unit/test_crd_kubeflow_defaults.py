"""mpiop's CRD defaults the MPIJob fields kubeflow/mpi-operator v0.8.2's CRD defaults, with the same values, so a
client reading a stored MPIJob sees the same object on both (docs/api.md, "Defaults"). The one field left out
is slotsPerWorker: unset means "the GPU limit" on mpiop, and a stored default would take that from jobs already
running (the apiserver defaults objects as it reads them from etcd too)."""

from __future__ import annotations

from pathlib import Path

import yaml

from mpiop.api.crd import crd
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.plan import Observed
from testkit.kubeflow import crd_defaults, kubeflow_crd, with_crd_defaults
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod, observe

NOT_DEFAULTED_BY_MPIOP = {"spec.slotsPerWorker": 1}


def test_kubeflow_crd_is_its_v2beta1_mpijob_crd(tmp_path: Path) -> None:
    theirs = kubeflow_crd(tmp_path)
    assert theirs["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert [v["name"] for v in theirs["spec"]["versions"]] == ["v2beta1"]


def test_mpiop_defaults_what_kubeflow_defaults_but_slots(tmp_path: Path) -> None:
    theirs = crd_defaults(kubeflow_crd(tmp_path))
    ours = crd_defaults(crd())
    assert theirs == {
        "spec.launcherCreationPolicy": "AtStartup",
        "spec.mpiImplementation": "OpenMPI",
        "spec.runLauncherAsWorker": False,
        "spec.runPolicy.suspend": False,
        "spec.slotsPerWorker": 1,
        "spec.sshAuthMountPath": "/root/.ssh",
    }
    assert ours == {path: value for path, value in theirs.items() if path not in NOT_DEFAULTED_BY_MPIOP}


def test_committed_crd_carries_the_defaults() -> None:
    committed = yaml.safe_load((Path(__file__).parents[2] / "crds" / "kubeflow.org_mpijobs.yaml").read_text())
    assert crd_defaults(committed) == crd_defaults(crd())


def test_a_defaulted_job_decides_as_the_same_job_without_defaults() -> None:
    """What the apiserver writes in is what mpiop applies to an unset field: old and new objects run alike."""
    bare = make_mpijob("pi").manifest()
    defaulted = with_crd_defaults(crd(), bare)
    assert defaulted != bare
    old, new = MPIJob.model_validate(bare), MPIJob.model_validate(defaulted)
    pods = [make_pod(old, "worker", i).running().ready().obj() for i in range(2)]
    for observed in (Observed(), observe(old), observe(old, pods)):
        assert decide(old, observed, at(0)) == decide(new, observed, at(0))
