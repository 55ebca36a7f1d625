"""The generated CRD: committed copy in sync, structural, within size, documented; examples fit the models."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from mpiop.api import podtemplate
from mpiop.api.crd import crd, crd_yaml
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MAX_WORKER_REPLICAS, MPIJob
from mpiop.cli import main

ROOT = Path(__file__).parents[2]
COMMITTED = ROOT / "crds" / "kubeflow.org_mpijobs.yaml"
KUBEFLOW_DEFAULTED = {".spec.launcherCreationPolicy", ".spec.mpiImplementation", ".spec.runLauncherAsWorker",
                      ".spec.runPolicy.suspend", ".spec.sshAuthMountPath"}

# apiextensions.k8s.io/v1 JSONSchemaProps fields (those a generated schema may use).
SCHEMA_KEYWORDS = {
    "description", "type", "format", "enum", "required", "pattern", "minimum", "maximum", "minLength",
    "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "properties", "items",
    "additionalProperties", "anyOf", "default", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
}


def root_schema() -> JSON:
    schema: JSON = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def schema_nodes(node: JSON, path: str = "") -> Iterator[tuple[str, JSON]]:
    """Every schema node with its path (property names, [] for items, {} for map values)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_is_up_to_date() -> None:
    assert COMMITTED.read_text() == crd_yaml(), "crds/ is stale: run `make crds` and commit the result"


def test_cli_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == crd_yaml()


def test_schema_is_structural() -> None:
    text = json.dumps(crd())
    assert "$ref" not in text and "$defs" not in text and "allOf" not in text and "oneOf" not in text
    count = 0
    for path, node in schema_nodes(root_schema()):
        count += 1
        assert set(node) <= SCHEMA_KEYWORDS, (path, set(node) - SCHEMA_KEYWORDS)
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            assert node.get("anyOf", [{"type": "integer"}, {"type": "string"}]) == [
                {"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, path
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "array":
            assert "items" in node, path
        for key in node.get("x-kubernetes-list-map-keys", []):
            item = node["items"]
            assert key in item.get("required", []) or "default" in item["properties"][key], (path, key)
        if "default" in node and path not in KUBEFLOW_DEFAULTED:
            # Besides kubeflow's, only list-map keys keep a default: a container port's protocol, an image
            # pull secret's name.
            assert path.endswith(("ports[].protocol", "imagePullSecrets[].name")), (path, node["default"])
    assert count > 1000  # the pod template is in there


def test_outside_the_pod_template_only_kubeflows_defaults() -> None:
    """The fields kubeflow's CRD defaults (tests/unit/test_crd_kubeflow_defaults.py compares them with its CRD);
    every other default is the controller's business (docs/api.md)."""
    templates = (".spec.mpiReplicaSpecs.Launcher.template", ".spec.mpiReplicaSpecs.Worker.template")
    defaulted = {path for path, node in schema_nodes(root_schema())
                 if "default" in node and not path.startswith(templates)}
    assert defaulted == KUBEFLOW_DEFAULTED


def test_crd_size_leaves_room_under_etcds_limit() -> None:
    size = len(json.dumps(crd(), separators=(",", ":")))
    assert size < 1_000_000, f"CRD is {size} bytes; etcd refuses objects over ~1.5 MB (with managedFields)"


def test_names_columns_and_subresources() -> None:
    spec = crd()["spec"]
    assert spec["names"]["shortNames"] == ["mpij"]
    assert set(spec["names"]["categories"]) == {"all", "kubeflow"}
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "State": ".status.conditions[-1:].type",
        "Workers": ".spec.mpiReplicaSpecs.Worker.replicas",
        "Ready": ".status.replicaStatuses.Worker.ready",
        "Progress": ".status.trainerStatus.progressPercentage",
        "ETA": ".status.trainerStatus.estimatedRemainingSeconds",
        "Age": ".metadata.creationTimestamp",
        "Restarts": ".status.restartCount",
        "Last Failure": ".status.lastFailure.reason",
        "Failed Pod": ".status.lastFailure.pod",
        "Attempt Age": ".status.attemptStartTime",
        "Excluded Nodes": ".status.excludedNodes",
        "Scheduled": ".status.scheduledTime",
        "Ranks Running": ".status.ranksRunningTime",
        "First Progress": ".status.firstProgressTime",
        "Last Progress": ".status.trainerStatus.lastUpdatedTime",
    }
    wide_only = {c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1}
    assert wide_only == {"Restarts", "Last Failure", "Failed Pod", "Attempt Age", "Excluded Nodes", "Scheduled",
                         "Ranks Running", "First Progress", "Last Progress"}, (
        "`-o wide` shows them")


def test_each_replica_type_has_the_pod_template() -> None:
    """Launcher and Worker are named properties (kubectl explain ...mpiReplicaSpecs.Worker.template.spec), each
    with the whole pod template: the only place the CRD repeats a schema, and the reason it doubled in size."""
    replica_specs = root_schema()["properties"]["spec"]["properties"]["mpiReplicaSpecs"]
    assert "additionalProperties" not in replica_specs
    assert set(replica_specs["properties"]) == {"Launcher", "Worker"}
    launcher, worker = (replica_specs["properties"][name] for name in ("Launcher", "Worker"))
    assert launcher["description"].startswith("The launcher:")
    assert worker["description"].startswith("The workers:")
    # The same but for the workers' maximum (the largest job mpiop is tested at).
    worker_replicas = worker["properties"]["replicas"]
    assert worker_replicas["maximum"] == MAX_WORKER_REPLICAS == 10_000
    assert "At most 10,000 workers" in worker_replicas["description"]
    unbounded = copy.deepcopy(worker)
    unbounded["properties"]["replicas"] = launcher["properties"]["replicas"]
    assert {k: v for k, v in launcher.items() if k != "description"} == {
        k: v for k, v in unbounded.items() if k != "description"}
    template = worker["properties"]["template"]
    assert template["properties"]["spec"]["required"] == ["containers"]
    assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(crd()), "nothing preserved unchecked"
    assert set(template["properties"]["metadata"]["properties"]) == {
        "annotations", "finalizers", "labels", "name", "namespace"}
    assert json.dumps(crd()).count("List of containers belonging to the pod.") == 2
    limits = template["properties"]["spec"]["properties"]["containers"]["items"]["properties"]["resources"]
    quantity = limits["properties"]["limits"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True  # `nvidia.com/gpu: 1` is an integer in YAML


def test_descriptions_everywhere_outside_the_template() -> None:
    for path, node in schema_nodes(root_schema()["properties"]["spec"], ".spec"):
        if ".template" not in path and not path.endswith("{}.minResources{}") and not path.endswith("{}"):
            assert node.get("description"), path
    for path, node in schema_nodes(root_schema()["properties"]["status"], ".status"):
        if not path.endswith("{}"):
            assert node.get("description"), path


def test_docs_cover_every_field() -> None:
    docs = (ROOT / "docs" / "api.md").read_text()
    for part in ("spec", "status"):
        for path, _node in schema_nodes(root_schema()["properties"][part], part):
            if ".template." in path or path.endswith("}") or path.endswith("[]"):
                continue
            field = path.rsplit(".", 1)[-1].replace("{}", "").replace("[]", "")
            # `field` or a dotted path ending in it, such as `conditions[].reason`
            assert re.search(rf"`[^`\s]*\b{field}`", docs), f"docs/api.md does not mention {path}"


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_round_trips_through_the_models(example: Path) -> None:
    manifest = yaml.safe_load(example.read_text())
    job = MPIJob.model_validate(manifest)
    assert job.to_json()["spec"] == manifest["spec"]
    assert job.spec.launcher is not None and job.spec.launcher.replica_count == 1


def test_pod_template_conversion_rejects_unknown_keywords() -> None:
    snapshot = json.loads(podtemplate.SNAPSHOT_PATH.read_text())
    spec = snapshot["schemas"]["io.k8s.api.core.v1.PodSpec"]
    spec["properties"]["hostname"]["x-kubernetes-something-new"] = True
    with pytest.raises(podtemplate.SchemaError, match="x-kubernetes-something-new"):
        podtemplate.structural_pod_template_schema(snapshot)


def test_snapshot_is_the_closure_of_pod_template_spec() -> None:
    snapshot = json.loads(podtemplate.SNAPSHOT_PATH.read_text())
    document = {"components": {"schemas": {**snapshot["schemas"], "io.k8s.api.core.v1.Unrelated": {}}}}
    assert podtemplate.closure(document) == snapshot["schemas"]
    assert snapshot["root"] == podtemplate.ROOT
