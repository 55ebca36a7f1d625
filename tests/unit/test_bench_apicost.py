"""The apicost bench's what-if CRDs: what each takes out, and only that."""

from __future__ import annotations

import json
from typing import Any

from bench.apicost import without_cel, without_template_schema
from mpiop.api.crd import crd


def _replicas(definition: dict[str, Any]) -> dict[str, Any]:
    schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    replicas: dict[str, Any] = schema["properties"]["spec"]["properties"]["mpiReplicaSpecs"]["properties"]
    return replicas


def test_without_the_template_schema_each_replicas_template_is_kept_unchecked_and_the_rest_unchanged() -> None:
    full = without_cel(crd())
    unchecked = without_template_schema(full)
    for role in ("Launcher", "Worker"):
        template = _replicas(unchecked)[role]["properties"]["template"]
        assert template["type"] == "object" and template["x-kubernetes-preserve-unknown-fields"] is True
        assert "properties" not in template
        assert _replicas(unchecked)[role]["properties"]["replicas"] == _replicas(full)[role]["properties"]["replicas"]
    assert len(json.dumps(unchecked)) < len(json.dumps(full)) / 10
    assert "properties" in _replicas(full)["Worker"]["properties"]["template"]  # the original is not changed
