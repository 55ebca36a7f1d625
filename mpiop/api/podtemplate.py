"""The core/v1 PodTemplateSpec schema for the CRD, taken from the apiserver's own OpenAPI v3 document.

Writing the pod schema by hand would drift from Kubernetes and miss fields, so
``hack/extract_podtemplate_schema.py`` fetches ``/openapi/v3/api/v1`` from a real apiserver of the pinned
version and commits the definitions that PodTemplateSpec reaches, unchanged, as ``podtemplatespec.schema.json``.
:func:`structural_pod_template_schema` then turns them, offline, into a structural CRD schema: ``$ref``s
inlined, Quantity and IntOrString as ``x-kubernetes-int-or-string``, embedded ObjectMeta reduced to what a
template may carry, and keywords that CRD schemas reject (or would misuse, like zero-value defaults) dropped.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from mpiop.api.raw import JSON

ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
SNAPSHOT_PATH = Path(__file__).with_name("podtemplatespec.schema.json")
OPENAPI_PATH = "/openapi/v3/api/v1"

_REF_PREFIX = "#/components/schemas/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# What controller-gen's generateEmbeddedObjectMeta keeps of an embedded ObjectMeta: the rest (uid,
# resourceVersion, managedFields, ...) means nothing in a template.
_EMBEDDED_META_FIELDS = ("annotations", "finalizers", "labels", "name", "namespace")
# The regular expression controller-gen puts on resource.Quantity (the apiserver's parser accepts the same).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
    r"|(\.[0-9]+))))?$"
)
# Keywords copied as they are; anything not listed here or in _DROPPED makes the conversion fail, so a
# new Kubernetes version's schema is looked at rather than silently mangled.
_COPIED = frozenset({
    "description", "type", "format", "enum", "required", "pattern", "minimum", "maximum",
    "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
})
_DROPPED = frozenset({
    "default",  # handled separately: only list-map keys keep theirs
    "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions",
    "x-kubernetes-group-version-kind",
})


class SchemaError(ValueError):
    """The OpenAPI document has a shape this conversion does not know."""


def ref_name(ref: str) -> str:
    if not ref.startswith(_REF_PREFIX):
        raise SchemaError(f"unsupported $ref {ref!r}")
    return ref[len(_REF_PREFIX):]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [ref_name(node["$ref"])] if isinstance(node.get("$ref"), str) else []
        return found + [r for key, value in node.items() if key != "$ref" for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def closure(openapi_document: JSON, root: str = ROOT) -> JSON:
    """The component schemas `root` reaches, as the apiserver serves them (the committed snapshot's content)."""
    schemas: JSON = openapi_document["components"]["schemas"]
    found: JSON = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        if name not in schemas:
            raise SchemaError(f"{name} is referenced but not defined in the OpenAPI document")
        found[name] = schemas[name]
        pending.extend(_refs(schemas[name]))
    return dict(sorted(found.items()))


def snapshot_document(openapi_document: JSON, kubernetes_version: str) -> JSON:
    """What hack/extract_podtemplate_schema.py writes: provenance and the definitions, nothing else."""
    return {
        "source": f"GET {OPENAPI_PATH} from kube-apiserver {kubernetes_version}; written by "
                  "hack/extract_podtemplate_schema.py, do not edit",
        "kubernetesVersion": kubernetes_version,
        "root": ROOT,
        "schemas": closure(openapi_document),
    }


@cache
def load_snapshot(path: Path = SNAPSHOT_PATH) -> JSON:
    loaded: JSON = json.loads(path.read_text())
    return loaded


class _Converter:
    """Inlines one root definition into a structural schema; one instance per conversion."""

    def __init__(self, schemas: JSON) -> None:
        self.schemas = schemas

    def convert_ref(self, name: str, site: JSON, stack: tuple[str, ...]) -> JSON:
        if name in stack:
            raise SchemaError(f"recursive schema {' -> '.join((*stack, name))}: cannot be inlined")
        description = site.get("description")
        if name in (_QUANTITY, _INT_OR_STRING):
            out: JSON = {}
            if description:
                out["description"] = description
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            if name == _QUANTITY:
                out["pattern"] = QUANTITY_PATTERN
            out["x-kubernetes-int-or-string"] = True
            return out
        if name == _OBJECT_META:
            return self.embedded_object_meta(description, stack)
        out = self.convert(self.schemas[name], (*stack, name))
        if description:
            out["description"] = description
        return out

    def embedded_object_meta(self, description: str | None, stack: tuple[str, ...]) -> JSON:
        """A template's metadata: the fields a template may carry, and nothing else.

        No `x-kubernetes-preserve-unknown-fields`: a field preserved unchecked can nest a thousand levels
        deep, past what JSON decoders accept (orjson stops at 1,024), and one such job would be unreadable
        to every client that lists MPIJobs. Unknown fields are refused by `kubectl`'s strict field
        validation and pruned, with a warning, for other clients.
        """
        meta = self.schemas[_OBJECT_META]
        out: JSON = {"description": description or meta.get("description", ""), "type": "object"}
        out["properties"] = {
            field: self.convert(meta["properties"][field], (*stack, _OBJECT_META))
            for field in _EMBEDDED_META_FIELDS
        }
        return out

    def convert(self, node: JSON, stack: tuple[str, ...]) -> JSON:
        if "$ref" in node:
            return self.convert_ref(ref_name(node["$ref"]), node, stack)
        all_of = node.get("allOf")
        if all_of is not None:
            if len(all_of) != 1 or set(all_of[0]) != {"$ref"}:
                raise SchemaError(f"unsupported allOf {all_of!r} under {stack[-1]}")
            rest = {k: v for k, v in node.items() if k != "allOf"}
            unknown = set(rest) - {"description", "default"}
            if unknown:
                raise SchemaError(f"unsupported keywords {sorted(unknown)} beside allOf under {stack[-1]}")
            return self.convert_ref(ref_name(all_of[0]["$ref"]), rest, stack)
        out: JSON = {}
        for key, value in node.items():
            if key in _COPIED:
                out[key] = value
            elif key == "properties":
                out[key] = {name: self.convert(prop, stack) for name, prop in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.convert(value, stack)
            elif key not in _DROPPED:
                raise SchemaError(f"unsupported keyword {key!r} under {stack[-1] if stack else 'root'}")
        if "oneOf" in out or "anyOf" in out:
            raise SchemaError(f"unsupported union under {stack[-1]}")
        if out.get("x-kubernetes-list-type") == "map":
            self._keep_list_map_key_defaults(node, out, stack)
        return out

    def _keep_list_map_key_defaults(self, source: JSON, out: JSON, stack: tuple[str, ...]) -> None:
        """List-map keys must be required or defaulted, so a key's default (protocol: TCP) survives."""
        item_source = source["items"]
        if "allOf" in item_source:
            item_source = self.schemas[ref_name(item_source["allOf"][0]["$ref"])]
        elif "$ref" in item_source:
            item_source = self.schemas[ref_name(item_source["$ref"])]
        item = out["items"]
        for key in out.get("x-kubernetes-list-map-keys", []):
            if key in item.get("required", []):
                continue
            default = item_source.get("properties", {}).get(key, {}).get("default")
            if default is None:
                raise SchemaError(f"list-map key {key!r} under {stack[-1]} is neither required nor defaulted")
            item["properties"][key]["default"] = default


def structural_pod_template_schema(snapshot: JSON | None = None) -> JSON:
    """The PodTemplateSpec as a structural CRD schema, from the committed snapshot unless one is given."""
    snapshot = snapshot if snapshot is not None else load_snapshot()
    return _Converter(snapshot["schemas"]).convert_ref(snapshot["root"], {}, ())
