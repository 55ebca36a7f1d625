"""controller.acceptance: the owned caches keep only what an MPIJob controls under one of its names; and what the
trims keep of those a tenant can write (labels, a ConfigMap's other keys) is bounded."""

from __future__ import annotations

import types
from typing import Any

import orjson
import pytest

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.controller import acceptance, trims
from mpiop.controller.caches import Caches
from mpiop.desired import evidence, launcher_rbac, objects, podgroup, pods
from mpiop.desired.podgroup import GangScheduler
from testkit.mpijobs import make_mpijob

JOB = make_mpijob("pi").workers(2).obj()
OWNER = names.owner_reference(JOB)


def obj(name: str, *refs: dict[str, Any], labels: dict[str, str] | None = None) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {names.OPERATOR_NAME_LABEL: "mpi-operator",
                                                                     **(labels or {})},
                         "ownerReferences": list(refs)}}


def ref(kind: str = "MPIJob", name: str = "pi", api_version: str = "kubeflow.org/v2beta1",
        controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": controller}


def test_every_object_mpiop_makes_for_a_job_is_accepted() -> None:
    """The names names.py gives (checked against the patterns, which cannot see names.py's functions)."""
    made = [("ConfigMap", objects.config_map(JOB, [])), ("Service", objects.service(JOB)),
            ("Secret", objects.ssh_secret(JOB, b"k", b"p")), ("Pod", pods.worker_pod(JOB, 1, 0)),
            ("Pod", pods.launcher_pod(JOB, 0)), ("Pod", pods.launcher_pod(JOB, 3)),
            ("ConfigMap", obj(names.attempt_config_map_name(JOB, 12), OWNER)),
            ("PodGroup", obj(podgroup.pod_group_name(JOB, GangScheduler("volcano"), 3), OWNER)),
            ("PodGroup", obj(podgroup.pod_group_name(JOB, GangScheduler(podgroup.KUBERNETES), 0), OWNER)),
            ("PodGroup", obj(podgroup.pod_group_name(JOB, GangScheduler(podgroup.KUBERNETES), 12), OWNER)),
            ("ServiceAccount", launcher_rbac.service_account(JOB)), ("RoleBinding", launcher_rbac.role_binding(JOB)),
            ("Role", launcher_rbac.role(JOB, [])),
            ("Role", obj("pi-launcher", OWNER)),  # a job's from before uid-derived names (legacy_launcher_account_name)
            ("Job", obj(names.launcher_name(JOB), ref(api_version="kubeflow.org/v2beta1")))]
    for kind, made_obj in made:
        assert acceptance.accepts(kind)(made_obj), (kind, made_obj["metadata"]["name"])


@pytest.mark.parametrize(("kind", "candidate"), [
    ("ConfigMap", obj("filler-0")),  # issue 60's filler: labelled, owned by nothing
    ("ConfigMap", obj("pi-config")),  # a squatter of a job's name, controlled by nothing
    ("ConfigMap", obj("pi-config", ref(controller=False))),  # owned, not controlled
    ("ConfigMap", obj("pi-config", ref(api_version="evil.example/v1"))),  # another group's MPIJob
    ("ConfigMap", obj("pi-config", ref(kind="Deployment"))),
    ("ConfigMap", obj("filler-0", ref())),  # a fake owner, a name no job makes
    ("ConfigMap", obj("pi-configx", ref())),
    ("ConfigMap", obj("other-config", ref())),  # another job's name than its controller's
    ("ConfigMap", obj("pi-attempt-x", ref())),
    ("Secret", obj("pi-ssh-2", ref())),
    ("Service", obj("pi-x", ref())),
    ("Pod", obj("pi-worker-", ref())),
    ("Pod", obj("pi-worker-1-x", ref())),
    ("Pod", obj("pi-launcher-x", ref())),
    ("Pod", obj("pi-launcher-abcde", ref(kind="Job", api_version="batch/v1"))),  # a Job's pod without the label
    ("Pod", obj("x-launcher-abcde", ref(kind="Job", api_version="batch/v1"), labels={names.JOB_NAME_LABEL: "pi"})),
    ("Role", obj("pi-launcher-extra", ref())),
    ("Role", obj("pi-reader", ref())),
    ("Role", obj("pi-0a1b2c3d-launcher", ref())),  # hex digits, but not those of its controller's uid ("u")
    ("ServiceAccount", obj("pi-x-launcher", ref())),
    ("Job", obj("pi", ref())),
    ("PodGroup", obj("pi-x", ref())),
    ("PodGroup", obj("pi-1-2", ref())),
    ("PodGroup", obj("pi-", ref())),
    ("PodGroup", obj("pi-worker-0", ref())),
])
def test_objects_no_job_controls_under_its_names_are_dropped(kind: str, candidate: JSON) -> None:
    assert not acceptance.accepts(kind)(candidate)


def test_a_pod_of_kubeflows_launcher_job_is_accepted_by_its_job_label() -> None:
    pod = obj("pi-launcher-x7k2p", ref(kind="Job", name="pi-launcher", api_version="batch/v1"),
              labels={names.JOB_NAME_LABEL: "pi"})
    assert acceptance.accepts("Pod")(pod)
    assert not acceptance.accepts("ConfigMap")(pod | {})


def test_a_trimmed_object_is_accepted_as_its_whole_one_was() -> None:
    """The controller feeds cached objects back (a pod it deleted, marked terminating: deleted_pods)."""
    worker = pods.worker_pod(JOB, 1, 0)
    assert acceptance.accepts("Pod")(trims.trim_pod(worker))


def test_only_the_labels_decisions_read_are_kept() -> None:
    worker = pods.worker_pod(JOB, 1, 0)
    kept = dict(worker["metadata"]["labels"])
    worker["metadata"]["labels"] |= {f"tenant.example/l{n}": "v" * 63 for n in range(1000)}
    worker["metadata"]["annotations"] = {"tenant.example/a": "x" * 200_000}
    trimmed = trims.trim_pod(worker)
    assert trimmed["metadata"]["labels"] == kept and "annotations" not in trimmed["metadata"]
    for trim in (trims.trim_config_map, trims.trim_secret, trims.trim_service, trims.trim_metadata_only,
                 trims.trim_role, trims.trim_launcher_batch_job, trims.trim_pod_group):
        assert set(trim(worker)["metadata"]["labels"]) <= trims.READ_LABELS


def test_a_hostfile_config_map_keeps_only_the_keys_mpiop_writes() -> None:
    """A tenant's own keys, however many, are not kept (nor compared: a merge patch would never remove them)."""
    wanted = objects.config_map(JOB, [0, 1])
    filled = wanted | {"data": {**wanted["data"], **{f"k{n}": "v" * 30 for n in range(20_000)}}}
    assert trims.trim_config_map(filled)["data"] == wanted["data"]
    assert trims.trim_config_map(wanted | {"data": {}})["data"] == {}


def test_what_mpiop_writes_in_a_hostfile_config_map_is_all_kept() -> None:
    """Every key config_map_data can write is one of OWN_KEYS: else an up-to-date ConfigMap would look changed."""
    wanted = objects.config_map(JOB, [0, 1], exec_launch=True)
    assert set(wanted["data"]) <= trims.OWN_KEYS
    assert trims.trim_config_map(wanted)["data"] == wanted["data"]


def test_a_config_map_decoded_in_its_shape_is_trimmed_as_the_whole_one() -> None:
    """The ConfigMap informer decodes only the data keys mpiop writes (trims.ConfigMapShape): a tenant's, and a saved
    attempt's logs, are skipped unread."""
    informer = Caches.build(types.SimpleNamespace(), "ns", watch_nodes=False).config_maps  # type: ignore[arg-type]
    hostfile = objects.config_map(JOB, [0, 1]) | {"data": {**objects.config_map(JOB, [0, 1])["data"], "x": "y"}}
    hostfile["metadata"] |= {"resourceVersion": "1"}
    for made in (hostfile, obj("filler-0") | {"data": {"k": "v"}}, evidence.config_map(JOB, 0, "why", [])):
        made["metadata"].setdefault("namespace", "ns")
        raw = orjson.dumps(made)
        shaped = informer.decode_line(b'{"type":"ADDED","object":' + raw + b"}")["object"]
        assert set(shaped.get("data") or {}) == set(made.get("data") or {}) & trims.OWN_KEYS
        assert trims.trim_config_map(shaped) == trims.trim_config_map(orjson.loads(raw))
        informer.apply_event({"type": "ADDED", "object": shaped})
    ns = JOB.metadata.namespace
    assert set(informer.cached_keys()) == {f"{ns}/pi-config", f"{ns}/pi-attempt-0"}
    assert informer.get(f"{ns}/pi-config") == trims.trim_config_map(orjson.loads(orjson.dumps(hostfile)))


@pytest.mark.parametrize("candidate", [
    obj("pi-attempt-3", OWNER),  # under an attempt's name, without the attempt label: a namespace's writer's
    obj("pi-attempt-3", OWNER, labels={names.ATTEMPT_LABEL: "3"}),  # a saved attempt
])
def test_only_the_hostfile_config_map_keeps_data(candidate: JSON) -> None:
    """A ConfigMap of the job under any name but its hostfile's keeps no data: a namespace's writer may make any
    number under attempt names, controlled by a real job (the Known gaps of docs/security.md, now closed)."""
    filled = candidate | {"data": {"hostfile": "x" * 900_000}}
    assert acceptance.accepts("ConfigMap")(filled)
    assert "data" not in trims.trim_config_map(filled)
