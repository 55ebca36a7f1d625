"""An operator whose role predates `deletecollection` on pods still cleans up: one 403, then one DELETE a pod.

The operator runs in-process on a ServiceAccount token whose Role is deploy/base's ClusterRole rules with
`deletecollection` taken off pods (namespaced: the operator watches this namespace only).
"""

from __future__ import annotations

from pathlib import Path

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.client import KubeClient
from testkit.operator import Cluster, drive_to_success, mpijob, running_operator
from testkit.rbac import base_rules, namespaced_role_kubeconfig

ACCOUNT = "mpiop-before-deletecollection"


def rules_without_deletecollection(control_plane: ControlPlane) -> list[JSON]:
    rules = base_rules(control_plane)
    taken = [{**rule, "verbs": [v for v in rule["verbs"] if v != "deletecollection"]} for rule in rules]
    assert taken != rules, "deploy/base no longer grants deletecollection: this test has nothing to take away"
    return taken


async def test_a_role_without_deletecollection_falls_back_to_one_delete_per_pod(
        control_plane: ControlPlane, kube: KubeClient, cluster: Cluster, tmp_path: Path) -> None:
    ns = cluster.ns
    kubeconfig = await namespaced_role_kubeconfig(control_plane, kube, tmp_path / "kubeconfig", ns, ACCOUNT,
                                                  rules_without_deletecollection(control_plane))

    name = "old-role"
    async with running_operator(kubeconfig, ns) as operator:
        await cluster.create_job(mpijob(name, workers=3))
        await drive_to_success(cluster, name, workers=3)
        deletions = [(verb, code) for verb, resource, code in operator.requests.calls
                     if resource == "pods" and verb == "DELETE"]
        # A Role cannot grant nodes: the operator found it may not list them and runs without the Node informer.
        assert operator.manager.caches.nodes is None
        assert ("GET", "nodes", 403) in operator.requests.calls
    print(f"\npod deletions (verb, code): {deletions}")
    assert deletions[0] == ("DELETE", 403)  # the collection, refused once
    assert sorted(deletions[1:]) == [("DELETE", 200)] * 3
