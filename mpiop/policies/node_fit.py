"""Which nodes a pod spec may run on, as far as laying out GPUs goes, in work bounded per pass (policies/gpu_layout).

A job's Worker template is the user's, unbounded by the CRD; matching it against every node naively costs
nodes x taints x tolerations (and nodes x affinity expressions x values) on the event loop, on every node event.
So the spec is read once per pass into indexes (`Fit`): tolerations by (key, effect) and (key, value, effect),
an Exists without a key answering at once; nodeSelector and affinity values as sets. Nodes are grouped by their
shape as the spec sees it (the labels it names, its NoSchedule/NoExecute taints, cordon, and the name only when
`matchFields` reads it), and each shape is judged once. What is left, spec size x shapes, is bounded by
`over_limit`: a spec with more entries than the operator's limit is not matched at all.

Pure: no I/O; the reasons come in two forms, `kind` (no node name, label or taint value: for the job's owner, who
may not read nodes) and `detail` (for the operator's log).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from mpiop.api.raw import JSON

NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")
CORDONED = "cordoned"
SELECTOR = "nodeSelector not matched"
AFFINITY = "required node affinity not matched"
TAINT = "taint not tolerated"
REASONS = (TAINT, SELECTOR, AFFINITY, CORDONED)  # the order a message lists them in
TEMPLATE = "spec.mpiReplicaSpecs.Worker.template.spec"
REQUIRED_TERMS = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _required_terms(pod_spec: JSON) -> list[Any]:
    affinity = _dict(_dict(pod_spec.get("affinity")).get("nodeAffinity"))
    return _list(_dict(affinity.get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))


# -- the limit ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverLimit:
    """A field of the template with more entries than the layout considers (`entries`: all of them, or None when
    counting stopped past the limit)."""

    field: str
    entries: int | None
    limit: int

    def __str__(self) -> str:
        counted = f"{self.entries} entries" if self.entries is not None else f"more than {self.limit} entries"
        return (f"{self.field}: {counted}, over the GPU layout's limit of {self.limit} (the operator's "
                "--gpu-layout-max-entries)")


def _affinity_within(terms: list[Any], limit: int) -> bool:
    """Whether the terms, their expressions and their expressions' values, each one entry, are at most `limit`:
    counting stops past it (all of them would walk a list as long as the job can be)."""
    count = len(terms)
    for term in terms:
        for expressions in (_dict(term).get("matchExpressions"), _dict(term).get("matchFields")):
            for expression in _list(expressions):
                if count > limit:
                    return False
                count += 1 + len(_list(_dict(expression).get("values")))
    return count <= limit


def over_limit(pod_spec: JSON, limit: int) -> OverLimit | None:
    """The first field the layout reads that has more than `limit` entries: tolerations, nodeSelector, or required
    node affinity (its terms, expressions and values). Counting stops past the limit."""
    if (tolerations := len(_list(pod_spec.get("tolerations")))) > limit:
        return OverLimit(f"{TEMPLATE}.tolerations", tolerations, limit)
    if (selector := len(_dict(pod_spec.get("nodeSelector")))) > limit:
        return OverLimit(f"{TEMPLATE}.nodeSelector", selector, limit)
    if not _affinity_within(_required_terms(pod_spec), limit):
        return OverLimit(f"{TEMPLATE}.{REQUIRED_TERMS}", None, limit)
    return None


# -- the indexes --------------------------------------------------------------------------------------------


class Tolerations:
    """A pod's tolerations, indexed: whether one tolerates a taint is a few set lookups, not a scan."""

    def __init__(self, tolerations: Iterable[Any]) -> None:
        self.every_taint_of: set[str] = set()  # effects ("" any) an Exists without a key tolerates whole
        self.exists: set[tuple[str, str]] = set()  # (key, effect) of Exists
        self.equal: set[tuple[str, str, str]] = set()  # (key, value, effect) of Equal
        for toleration in tolerations:
            if not isinstance(toleration, dict):
                continue
            key, effect, value = (toleration.get(f) or "" for f in ("key", "effect", "value"))
            if not all(isinstance(v, str) for v in (key, effect, value)):
                continue
            if toleration.get("operator") == "Exists":
                if key:
                    self.exists.add((key, effect))
                else:
                    self.every_taint_of.add(effect)
            else:
                self.equal.add((key, value, effect))

    def tolerate(self, taint: JSON) -> bool:
        key, value, effect = taint.get("key"), taint.get("value") or "", taint.get("effect") or ""
        return ("" in self.every_taint_of or effect in self.every_taint_of
                or (key, "") in self.exists or (key, effect) in self.exists
                or (key, value, "") in self.equal or (key, value, effect) in self.equal)


@dataclass(frozen=True)
class _Expression:
    key: str
    operator: str
    values: frozenset[str]
    bound: int | None  # Gt, Lt: the value, read once

    @classmethod
    def read(cls, raw: Any) -> _Expression:
        raw = _dict(raw)
        values = [v for v in _list(raw.get("values")) if isinstance(v, str)]
        try:
            bound: int | None = int(values[0])
        except (ValueError, IndexError):
            bound = None
        return cls(str(raw.get("key")), str(raw.get("operator")), frozenset(values), bound)

    def matches(self, value: str | None) -> bool:
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        if self.bound is None or self.operator not in ("Gt", "Lt"):
            return False
        try:
            number = int(str(value))
        except ValueError:
            return False
        return number > self.bound if self.operator == "Gt" else number < self.bound


@dataclass(frozen=True)
class Unfit:
    """Why a node is left out: `kind` (one of REASONS: what the job's owner may be told) and `detail` (which key,
    which taint: for the operator's log)."""

    kind: str
    detail: str


class Fit:
    """A pod spec's node constraints, read once: `why_not(node)` judges each shape of node once (`judged` counts
    them), so a pass costs a look at each node's named labels and taints, plus spec size x distinct shapes."""

    def __init__(self, pod_spec: JSON) -> None:
        self.selector = {str(k): v for k, v in _dict(pod_spec.get("nodeSelector")).items()}
        self.terms = [([_Expression.read(e) for e in _list(_dict(t).get("matchExpressions"))],
                       [_Expression.read(e) for e in _list(_dict(t).get("matchFields"))])
                      for t in _required_terms(pod_spec)]
        self.tolerations = Tolerations(_list(pod_spec.get("tolerations")))
        self.keys = frozenset([*self.selector, *(e.key for labels, _ in self.terms for e in labels)])
        self.sorted_keys = sorted(self.keys)
        self.reads_name = any(fields for _, fields in self.terms)
        self.judged = 0
        self._shapes: dict[Hashable, Unfit | None] = {}

    def shape(self, node: JSON) -> Hashable:
        """What of the node the spec can tell apart: the labels it names, the taints that keep pods off, the
        cordon, and the name if a term reads it. Costs min(labels, keys) and the node's taints."""
        labels = node["metadata"].get("labels") or {}
        named = (tuple(sorted((k, v) for k, v in labels.items() if k in self.keys)) if len(labels) <= len(self.keys)
                 else tuple((k, labels[k]) for k in self.sorted_keys if k in labels))
        spec = node.get("spec") or {}
        taints = tuple(sorted((str(t.get("key")), str(t.get("value") or ""), str(t.get("effect")))
                              for t in spec.get("taints") or [] if t.get("effect") in NO_SCHEDULE_EFFECTS))
        return (bool(spec.get("unschedulable")), named, taints,
                node["metadata"]["name"] if self.reads_name else None)

    def why_not(self, node: JSON) -> Unfit | None:
        """Why a pod of this spec cannot run on the node (None: it can, as far as GPUs go)."""
        shape = self.shape(node)
        if shape not in self._shapes:
            self.judged += 1
            self._shapes[shape] = self._judge(node)
        return self._shapes[shape]

    def _judge(self, node: JSON) -> Unfit | None:
        spec = node.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        if spec.get("unschedulable"):
            return Unfit(CORDONED, CORDONED)
        unmatched = sorted(k for k, v in self.selector.items() if labels.get(k) != v)
        if unmatched:
            return Unfit(SELECTOR, f"nodeSelector {', '.join(unmatched)} not matched")
        fields = {"metadata.name": node["metadata"]["name"]}
        if self.terms and not any(all(e.matches(labels.get(e.key)) for e in by_label)
                                  and all(e.matches(fields.get(e.key)) for e in by_field)
                                  for by_label, by_field in self.terms):
            return Unfit(AFFINITY, AFFINITY)
        for taint in spec.get("taints") or []:
            if taint.get("effect") in NO_SCHEDULE_EFFECTS and not self.tolerations.tolerate(taint):
                value = f"={taint['value']}" if taint.get("value") else ""
                return Unfit(TAINT, f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated")
        return None

