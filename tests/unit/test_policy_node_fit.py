"""mpiop.policies.node_fit: which nodes a Worker template may run on, in bounded work. Tolerations are matched
through an index exactly as Kubernetes matches them one by one; nodes are judged once per shape the template can
tell apart; a template over the limit is counted, not matched. (The layout's own messages: test_policy_gpu_layout.)"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from mpiop.api.raw import JSON
from mpiop.policies.node_fit import AFFINITY, CORDONED, SELECTOR, TAINT, Fit, OverLimit, Tolerations, over_limit
from testkit.nodes import gpu_node, gpu_nodes, taint

KEYS, VALUES, EFFECTS = ("a", "b", ""), ("", "x", "y"), ("", "NoSchedule", "NoExecute")


def scanned(taint_: JSON, tolerations: list[JSON]) -> bool:
    """Kubernetes' ToleratesTaint, one toleration after another (what the index stands for)."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint_.get("effect"):
            continue
        key = toleration.get("key") or ""
        if toleration.get("operator") == "Exists":
            if not key or key == taint_.get("key"):
                return True
        elif key == taint_.get("key") and (toleration.get("value") or "") == (taint_.get("value") or ""):
            return True
    return False


@pytest.mark.parametrize(("tolerations", "tolerated"), [
    pytest.param([], False, id="none"),
    pytest.param([{"operator": "Exists"}], True, id="exists-without-key-tolerates-everything"),
    pytest.param([{"operator": "Exists", "effect": "NoExecute"}], False, id="exists-without-key-other-effect"),
    pytest.param([{"operator": "Exists", "effect": "NoSchedule"}], True, id="exists-without-key-same-effect"),
    pytest.param([{"key": "dedicated", "operator": "Exists"}], True, id="exists-key"),
    pytest.param([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], False, id="exists-key-effect"),
    pytest.param([{"key": "dedicated", "value": "infer"}], True, id="equal-by-default"),
    pytest.param([{"key": "dedicated", "operator": "Equal", "value": "train"}], False, id="equal-other-value"),
    pytest.param([{"key": "other", "operator": "Exists"}, {"key": "dedicated", "value": "infer",
                                                           "effect": "NoSchedule"}], True, id="second-of-two"),
    pytest.param([{"value": "infer"}], False, id="equal-without-key"),
    pytest.param(["not a toleration", {"key": ["no"], "operator": "Exists"}], False, id="malformed-skipped"),
])
def test_tolerations_table(tolerations: list[JSON], tolerated: bool) -> None:
    assert Tolerations(tolerations).tolerate(taint("dedicated", "infer")) is tolerated


def test_the_index_agrees_with_the_scan_on_every_single_and_paired_toleration() -> None:
    tolerations = [{k: v for k, v in (("key", key), ("operator", op), ("value", value), ("effect", effect)) if v}
                   for key, op, value, effect in itertools.product(KEYS, ("Exists", "Equal", ""), VALUES, EFFECTS)]
    taints = [taint(key, value, effect) for key, value, effect in itertools.product(KEYS[:2], VALUES, EFFECTS[1:])]
    checked = 0
    for chosen in [*([t] for t in tolerations), *itertools.combinations(tolerations, 2)]:
        index = Tolerations(chosen)
        for one in taints:
            assert index.tolerate(one) is scanned(one, list(chosen)), (one, chosen)
            checked += 1
    assert checked > 10_000


@pytest.mark.parametrize(("pod_spec", "nodes", "judged"), [
    pytest.param({"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
                 gpu_nodes("n", 300, 8, taints=[taint("dedicated", "infer")]), 1, id="same-taint-one-shape"),
    pytest.param({"nodeSelector": {"pool": "a"}}, gpu_nodes("n", 300, 8, labels={"pool": "a"}), 1,
                 id="names-differ-labels-unnamed"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n-0"]}]}]}}}},
        gpu_nodes("n", 300, 8), 300, id="hostname-named-each-its-own"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-0"]}]}]}}}},
        gpu_nodes("n", 30, 8), 30, id="match-fields-each-its-own"),
    pytest.param({}, [gpu_node(f"n-{i}", 8, taints=[taint("pool", str(i % 3))]) for i in range(300)], 3,
                 id="three-taints-three-shapes"),
    pytest.param({}, [*gpu_nodes("n", 150, 8), *gpu_nodes("c", 150, 8, unschedulable=True)], 2, id="cordon"),
])
def test_each_shape_of_node_is_judged_once(pod_spec: JSON, nodes: list[JSON], judged: int) -> None:
    fit = Fit(pod_spec)
    for node in nodes:
        fit.why_not(node)
    assert fit.judged == judged


@pytest.mark.parametrize(("node", "kind", "detail"), [
    pytest.param(gpu_node("n", 8, unschedulable=True, taints=[taint("dedicated", "infer")]), CORDONED, CORDONED,
                 id="cordoned-first"),
    pytest.param(gpu_node("n", 8, labels={"pool": "b"}), SELECTOR, "nodeSelector pool not matched", id="selector"),
    pytest.param(gpu_node("n", 8, labels={"pool": "a"}), AFFINITY, AFFINITY, id="affinity"),
    pytest.param(gpu_node("n", 8, labels={"pool": "a", "zone": "1"}, taints=[taint("dedicated", "infer", "NoExecute")]),
                 TAINT, "taint dedicated=infer:NoExecute not tolerated", id="taint"),
])
def test_why_a_node_is_left_out(node: JSON, kind: str, detail: str) -> None:
    fit = Fit({"nodeSelector": {"pool": "a"}, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["0"]}]}]}}}})
    why = fit.why_not(node)
    assert why is not None and (why.kind, why.detail) == (kind, detail)


@pytest.mark.parametrize(("pod_spec", "over"), [
    pytest.param({"tolerations": [{}] * 11}, OverLimit("spec.mpiReplicaSpecs.Worker.template.spec.tolerations", 11, 10),
                 id="tolerations"),
    pytest.param({"tolerations": [{}] * 10, "nodeSelector": {str(i): "" for i in range(10)}}, None, id="at-it"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2", "3"]}],
                               "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n", "m"]}]},
                              {}]}}}},
        OverLimit("spec.mpiReplicaSpecs.Worker.template.spec.affinity.nodeAffinity."
                  "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", None, 8),
        id="affinity-terms-expressions-values"),
    pytest.param({"tolerations": "not a list", "affinity": {"nodeAffinity": []}}, None, id="malformed-counts-nothing"),
])
def test_over_limit(pod_spec: JSON, over: OverLimit | None) -> None:
    assert over_limit(pod_spec, 10 if over is None else over.limit) == over


@pytest.mark.parametrize(("terms", "within"), [
    pytest.param([{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2", "3"]}]}], True,
                 id="1-term-1-expression-3-values-is-5"),
    pytest.param([{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2", "3", "4"]}]}], False,
                 id="6"),
    pytest.param([{}] * 5, True, id="5-empty-terms"),
    pytest.param([{}] * 6, False, id="6-empty-terms"),
    pytest.param([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}, {}, {}], True,
                 id="fields-count-too"),
])
def test_affinity_entries_at_a_limit_of_5(terms: list[JSON], within: bool) -> None:
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}}
    assert (over_limit(spec, 5) is None) is within


class Walked(list[JSON]):
    """A list that counts the items it hands out."""

    handed = 0

    def __iter__(self) -> Iterator[JSON]:
        for item in super().__iter__():
            self.handed += 1
            yield item


def test_counting_a_long_affinity_stops_past_the_limit() -> None:
    expressions = Walked({"key": f"k{i}", "operator": "Exists"} for i in range(100_000))
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}}
    assert over_limit(spec, 1000) is not None
    assert expressions.handed == 1001


def test_a_malformed_template_is_matched_as_far_as_it_reads() -> None:
    """The webhook sees a job before the apiserver checks its schema: odd shapes leave a node in or out, never raise."""
    fit = Fit({"tolerations": "x", "nodeSelector": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": [{"a": 1}, "1"]}, "junk"]}]}}}})
    assert fit.why_not(gpu_node("n", 8, labels={"zone": "1"})) is not None  # "junk" is an expression matching nothing
