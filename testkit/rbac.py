"""The operator's requests as RBAC sees them, the rules deploy/ grants, and a kubeconfig holding only the
operator ServiceAccount's token: how the tests show the RBAC is sufficient and minimal."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.client import KubeClient, RequestHook
from testkit.deploy import DEPLOY, SYSTEM, docs

ACCOUNT = "mpiop"
Request = tuple[str, str, str, str]
"""(verb, API group, resource[/subresource], name) as RBAC sees a request."""


def as_rbac(method: str, path: str, query: Mapping[str, Any]) -> Request:
    parts = path.split("?")[0].strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if not rest:  # discovery (/apis/<group>/<version>): a non-resource URL every authenticated user may get
        return "get", group, "", ""
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection"}.get(method)
    if verb is None:
        verb = "get" if name else "watch" if query.get("watch") == "true" else "list"
    return verb, group, resource, name


def recorder(requests: list[Request]) -> RequestHook:
    """A KubeClient `on_request` hook that notes every request into `requests` as the authorizer will see it."""
    def record(method: str, path: str, query: Mapping[str, Any]) -> None:
        requests.append(as_rbac(method, path, query))

    return record


@contextlib.contextmanager
def applied(control_plane: ControlPlane, kustomization: Path, kinds: Collection[str]) -> Iterator[list[JSON]]:
    """The objects of `kinds` a kustomization of deploy/ builds, applied for real (in deploy/'s namespace) and
    removed afterwards."""
    built = docs(control_plane.kubectl("kustomize", str(kustomization)))
    control_plane.kubectl("apply", "--server-side", "-f", str(DEPLOY / "base" / "namespace.yaml"))
    chosen = [obj for obj in built if obj["kind"] in kinds]
    text = yaml.safe_dump_all(chosen)
    control_plane.kubectl("apply", "--server-side", "-f", "-", input_text=text)
    try:
        yield chosen
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "-f", "-", input_text=text)


def rules(objects: list[JSON]) -> list[JSON]:
    return [rule for obj in objects if obj["kind"] in ("ClusterRole", "Role") for rule in obj["rules"]]


def allows(rule: JSON, request: Request) -> bool:
    verb, group, resource, name = request
    return (group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
            and (not rule.get("resourceNames") or name in rule["resourceNames"]))


async def pod_token(kube: KubeClient, namespace: str, pod: JSON, audience: str = "mpiop.kubeflow.org",
                    account: str = "default") -> str:
    """A token of `account` bound to `pod` with `audience`: what the kubelet's projected volume holds."""
    meta = pod["metadata"]
    answer = await kube.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"audiences": [audience], "expirationSeconds": 600,
                       "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                          "uid": meta["uid"]}}})
    return str(answer["status"]["token"])


async def service_account_kubeconfig(control_plane: ControlPlane, kube: KubeClient, path: Path,
                                     namespace: str = SYSTEM, account: str = ACCOUNT) -> str:
    """Write to `path` a kubeconfig holding only a fresh token of a ServiceAccount (mpiop's) and the cluster's CA."""
    answer = await kube.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": control_plane.server,
                                                "certificate-authority": str(Path(control_plane.pki) / "ca.crt")}}],
        "users": [{"name": ACCOUNT, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": ACCOUNT}}],
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def base_rules(control_plane: ControlPlane) -> list[JSON]:
    """deploy/base's ClusterRole rules, as kustomize builds them."""
    built = docs(control_plane.kubectl("kustomize", str(DEPLOY / "base")))
    return [rule for obj in built if obj["kind"] == "ClusterRole" for rule in obj["rules"]]


async def namespaced_role_kubeconfig(control_plane: ControlPlane, kube: KubeClient, path: Path, namespace: str,
                                     account: str, rules: list[JSON]) -> str:
    """A ServiceAccount in `namespace` bound to a Role of these rules there (an operator watching that namespace
    alone, with an older or narrower role than deploy/'s), and a kubeconfig holding only its token."""
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": account}, "rules": rules})
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    return await service_account_kubeconfig(control_plane, kube, path, namespace, account)
