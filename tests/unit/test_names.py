"""mpiop.names: deterministic names, kubeflow labels, DNS names and owner references."""

from __future__ import annotations

import pytest

from mpiop import names
from testkit.mpijobs import make_mpijob


def test_names_of_owned_objects() -> None:
    job = make_mpijob("pi", "team-a").obj()
    assert names.launcher_name(job) == "pi-launcher"
    assert names.worker_name(job, 3) == "pi-worker-3"
    assert names.config_map_name(job) == "pi-config"
    assert names.ssh_secret_name(job) == "pi-ssh"
    assert names.service_name(job) == "pi"


@pytest.mark.parametrize(
    ("cluster_domain", "expected"),
    [
        ("", "pi-worker-0.pi.team-a.svc"),
        ("cluster.local", "pi-worker-0.pi.team-a.svc.cluster.local"),
        ("corp.example", "pi-worker-0.pi.team-a.svc.corp.example"),
    ],
    ids=["no-domain", "cluster.local", "custom-domain"],
)
def test_host_name(cluster_domain: str, expected: str) -> None:
    job = make_mpijob("pi", "team-a").obj()
    assert names.host_name(job, "pi-worker-0", cluster_domain) == expected


@pytest.mark.parametrize(
    ("role", "index", "attempt", "expected"),
    [
        ("worker", 2, 0, {"training.kubeflow.org/job-role": "worker", "training.kubeflow.org/replica-index": "2",
                          "mpiop.kubeflow.org/attempt": "0"}),
        ("launcher", None, 3, {"training.kubeflow.org/job-role": "launcher", "mpiop.kubeflow.org/attempt": "3"}),
    ],
    ids=["worker", "launcher-no-index"],
)
def test_role_labels(role: str, index: int | None, attempt: int, expected: dict[str, str]) -> None:
    job = make_mpijob("pi").obj()
    assert names.role_labels(job, role, index, attempt) == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        **expected,
    }


def test_selector_string_is_sorted_and_has_no_attempt() -> None:
    job = make_mpijob("pi").obj()
    assert names.selector_string(job, "worker") == (
        "training.kubeflow.org/job-name=pi,training.kubeflow.org/job-role=worker,"
        "training.kubeflow.org/operator-name=mpi-operator"
    )


def test_owner_reference_is_controller() -> None:
    job = make_mpijob("pi").uid("1234-abcd").obj()
    assert names.owner_reference(job) == {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "pi",
        "uid": "1234-abcd",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_owned_metadata_defaults_to_job_labels() -> None:
    job = make_mpijob("pi", "ns1").obj()
    meta = names.owned_metadata(job, "pi-config")
    assert meta["name"] == "pi-config"
    assert meta["namespace"] == "ns1"
    assert meta["labels"] == names.job_labels(job)
    assert meta["ownerReferences"][0]["uid"] == "uid-pi"


@pytest.mark.parametrize(
    ("pod_name", "index"),
    [("pi-worker-0", 0), ("pi-worker-12", 12), ("pi-launcher", None), ("pi-worker-", None), ("pi-worker-01", None),
     ("pi-worker-1x", None), ("pii-worker-1", None), ("pi-worker-worker-1", None)],
)
def test_worker_index_of_a_pod_name(pod_name: str, index: int | None) -> None:
    assert names.worker_index(make_mpijob("pi").obj(), pod_name) == index


@pytest.mark.parametrize(("launcher_as_worker", "labels"), [(False, [0, 1]), (True, [1, 2])])
def test_worker_label_index(launcher_as_worker: bool, labels: list[int]) -> None:
    job = make_mpijob("pi").launcher_as_worker(launcher_as_worker).obj()
    assert [names.worker_label_index(job, i) for i in range(2)] == labels


def test_supporting_labels_add_kubeflows_app() -> None:
    job = make_mpijob("pi").obj()
    assert names.supporting_labels(job) == {**names.job_labels(job), "app": "pi"}
