"""mpiop.controller.caches' Node trim: only nodes with an extended resource are cached, and only what laying out a
total-GPU job reads, so a CPU cluster's nodes take no memory and heartbeats wake nothing."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.controller.caches import same_but_version
from mpiop.controller.trims import has_extended_resources, trim_node
from testkit.nodes import gpu_node, taint

JSON = dict[str, Any]


def cpu_node() -> JSON:
    node = gpu_node("cpu", 0)
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "hugepages-1Gi": "0",
                 "ephemeral-storage": "100Gi", "attachable-volumes-aws-ebs.kubernetes.io/x": "25"}
    node["status"] = {"capacity": resources, "allocatable": dict(resources)}
    return node


@pytest.mark.parametrize(("node", "cached"), [
    pytest.param(gpu_node("a", 8), True, id="nvidia"),
    pytest.param(gpu_node("b", 7, "nvidia.com/mig-1g.5gb"), True, id="mig"),
    pytest.param(gpu_node("c", 0), False, id="zero-gpus"),
    pytest.param(cpu_node(), False, id="cpu-only"),
])
def test_only_nodes_with_extended_resources_are_cached(node: JSON, cached: bool) -> None:
    assert has_extended_resources(node) is cached


def test_a_node_is_trimmed_to_what_the_layout_reads_and_heartbeats_change_nothing() -> None:
    node = gpu_node("a", 8, labels={"pool": "x"}, taints=[taint("dedicated", "infer")])
    node["metadata"]["resourceVersion"] = "1"
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]
    trimmed = trim_node(node)
    assert trimmed["status"] == {"allocatable": {"nvidia.com/gpu": "8"}}
    assert trimmed["spec"] == {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}
    assert trimmed["metadata"]["labels"] == {"kubernetes.io/hostname": "a", "pool": "x"}
    beat = {**node, "metadata": {**node["metadata"], "resourceVersion": "2"},
            "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True",
                                                           "lastHeartbeatTime": "t2"}]}}
    assert same_but_version(trimmed, trim_node(beat))
    cordoned = {**node, "spec": {**node["spec"], "unschedulable": True}}
    assert not same_but_version(trimmed, trim_node(cordoned))
