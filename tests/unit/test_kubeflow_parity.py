"""The last differences a tool could read between kubeflow/mpi-operator v0.8 and mpiop, closed.

The replica-index numbering with runLauncherAsWorker, the `app` label of the ConfigMap, Secret and Service
(compared with what kubeflow's operator really made: testkit/fixtures), and the condition order of a whole
job. Slots from the launcher's GPUs are in test_desired_gpus.py.
"""

from __future__ import annotations

import pytest

from mpiop import names, podstate
from mpiop.decide import decide
from mpiop.desired import objects, pods
from mpiop.plan import Observed
from testkit.kubeflow import load, of_kind
from testkit.mpijobs import at, make_mpijob
from testkit.pods import make_pod, observe


@pytest.mark.parametrize(
    ("launcher_as_worker", "labels"),
    [(False, ["0", "1", "2"]), (True, ["1", "2", "3"])],
    ids=["workers-0..N-1", "launcher-as-worker-1..N"],
)
def test_worker_replica_index_label(launcher_as_worker: bool, labels: list[str]) -> None:
    job = make_mpijob("pi").workers(3).launcher_as_worker(launcher_as_worker).obj()
    made = [pods.worker_pod(job, i, 0) for i in range(3)]
    assert [p["metadata"]["name"] for p in made] == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    assert [p["metadata"]["labels"][names.REPLICA_INDEX_LABEL] for p in made] == labels
    assert pods.launcher_pod(job, 0)["metadata"]["labels"][names.REPLICA_INDEX_LABEL] == "0"


def test_launcher_as_worker_job_runs_with_kubeflows_numbering() -> None:
    """Workers labelled 1..N are this attempt's workers 0..N-1: none is stale, the hostfile lists them all."""
    job = make_mpijob("pi").workers(2).launcher_as_worker().obj()
    running = [make_pod(job, "launcher").ready().obj(), make_pod(job, "worker", 0).ready().obj(),
               make_pod(job, "worker", 1).ready().obj()]
    assert [podstate.replica_index(p) for p in running] == [0, 1, 2]
    observed = observe(job, running)
    assert sorted(observed.workers(job, 0)) == [0, 1]
    plan = decide(job, observed, at(1))
    assert (plan.objects_to_create, plan.pods_to_delete, plan.objects_to_update) == ([], [], [])
    assert plan.status.is_true("Running")
    assert "echo pi-worker-1.pi.default.svc:1" in (observed.config_map or {})["data"]["discover_hosts.sh"]


@pytest.mark.parametrize("label", ["1", "2"], ids=["kubeflow-before-v0.8", "v0.8"])
def test_workers_are_known_by_name_whichever_way_the_label_counts(label: str) -> None:
    """kubeflow before v0.8 labelled a runLauncherAsWorker job's worker-1 "1": it is still worker 1, not stale."""
    job = make_mpijob("pi").workers(2).launcher_as_worker().obj()
    pods_now = [make_pod(job, "launcher").ready().obj(), make_pod(job, "worker", 0).ready().obj(),
                make_pod(job, "worker", 1).label(names.REPLICA_INDEX_LABEL, label).ready().obj()]
    plan = decide(job, observe(job, pods_now), at(1))
    assert (plan.objects_to_create, plan.pods_to_delete) == ([], [])


def test_a_worker_beyond_the_replicas_is_stale_in_either_numbering() -> None:
    job = make_mpijob("pi").workers(1).launcher_as_worker().obj()
    extra = make_pod(make_mpijob("pi").workers(2).launcher_as_worker(), "worker", 1).ready().obj()
    plan = decide(job, observe(job, [make_pod(job, "worker", 0).ready().obj(), extra]), at(1))
    assert [podstate.name(p) for p in plan.pods_to_delete] == ["pi-worker-1"]


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret", "Service"])
def test_supporting_objects_carry_kubeflows_app_label(kind: str) -> None:
    kubeflows = of_kind(load("kf-pi-ok.1-running"), kind)[0]
    job = make_mpijob("pi").obj()
    ours = {"ConfigMap": objects.config_map(job, []), "Secret": objects.ssh_secret(job, b"k", b"k.pub"),
            "Service": objects.service(job)}[kind]
    labels = ours["metadata"]["labels"]
    assert kubeflows["metadata"]["labels"].items() <= labels.items()
    assert labels == {"app": "pi", **names.job_labels(job)}


def test_service_selects_pods_as_kubeflows_does() -> None:
    kubeflows = of_kind(load("kf-pi-ok.1-running"), "Service")[0]
    assert objects.service(make_mpijob("pi").obj())["spec"]["selector"] == kubeflows["spec"]["selector"]


def test_a_whole_job_lists_its_conditions_in_kubeflows_order() -> None:
    """As kubeflow's finished `pi` reads: Created, Running (False), Succeeded; the last one is the state."""
    kubeflows = of_kind(load("kf-pi-ok.2-finished"), "MPIJob")[0]["status"]["conditions"]
    job = make_mpijob("pi").workers(1).obj()
    pods_now = [make_pod(job, "launcher").ready().obj(), make_pod(job, "worker", 0).ready().obj()]
    for step, launcher in enumerate((pods_now[0], make_pod(job, "launcher").succeeded().obj())):
        plan = decide(job, observe(job, [launcher, pods_now[1]]), at(step))
        job = job.model_copy(update={"status": plan.status})
        job.status.last_reconcile_time = at(step)
    # (Running's reason when it goes False is mpiop's, why it stopped: MPIJobSucceeded here.)
    ours = [(c.type, c.status) for c in job.status.conditions]
    assert ours == [(c["type"], c["status"]) for c in kubeflows]
    assert ours[-1][0] == "Succeeded"


def test_observed_workers_default_to_no_launcher_batch_job() -> None:
    assert Observed().launcher_batch_job is None and Observed().launcher_batch_job_pods == []
