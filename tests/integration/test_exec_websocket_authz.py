"""Why the launcher's exec Role grants `pods/exec` both `get` and `create` (mpiop/desired/launcher_rbac.py), on the real
apiserver: from 1.35 a WebSocket exec (kubectl's first try, a GET upgrade: RBAC's verb `get`) is also authorized as
`create` (feature gate AuthorizePodWebsocketUpgradeCreatePermission, beta and on from 1.35; `ExecREST.Connect` checks
it before it looks the pod's node up). So with `get` alone the upgrade is refused 403 (a bare "forbidden", no RBAC
wording), as the 1.35 release notes warn; with both it passes authorization and reaches the pod's node (here: none
assigned, a 400 from the same handler, past every authorization check).
Runs again on the oldest supported minor (OLDEST_MINOR)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.parse

import aiohttp
import pytest

from devcluster.controlplane import ControlPlane
from mpiop.api.raw import JSON
from mpiop.kube.client import PODS, KubeClient

pytestmark = pytest.mark.integration

RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{kind}"
POD = "ws-target"


def role(name: str, exec_verbs: list[str]) -> JSON:
    exec_rule = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": exec_verbs, "resourceNames": [POD]}]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, *(exec_rule if exec_verbs else [])]}


async def account_token(kube: KubeClient, ns: str, name: str, exec_verbs: list[str]) -> str:
    """A ServiceAccount `name` bound to a Role granting `exec_verbs` on `pods/exec` of POD; a fresh token of it."""
    await kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                       body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    await kube.request("POST", RBAC.format(ns=ns, kind="roles"), body=role(name, exec_verbs))
    await kube.request("POST", RBAC.format(ns=ns, kind="rolebindings"), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})
    answer = await kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token", body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})
    return str(answer["status"]["token"])


async def websocket_exec(control_plane: ControlPlane, ns: str, token: str) -> tuple[int, str]:
    """kubectl's WebSocket exec (`v5.channel.k8s.io`) into POD as `token`, its upgrade request as kubectl sends it:
    the answer's status and the apiserver's message (a refusal's Status body)."""
    query = urllib.parse.urlencode([("command", "true"), ("stdout", "1"), ("stderr", "1")])
    url = f"{control_plane.server}/api/v1/namespaces/{ns}/pods/{POD}/exec?{query}"
    context = ssl.create_default_context(cafile=str(control_plane.pki / "ca.crt"))  # the token alone: no client cert
    headers = {"Authorization": f"Bearer {token}", "Connection": "Upgrade", "Upgrade": "websocket",
               "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
               "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=context) as answer:
        if answer.status == 101:
            return 101, "upgraded"
        body = await answer.text()
        try:
            return answer.status, str(json.loads(body).get("message", body))
        except ValueError:
            return answer.status, body


# pods/exec verbs granted -> what the upgrade gets: RBAC refuses the GET upgrade without `get` (its own wording), the
# synthetic check refuses it without `create` (a bare "forbidden: "), and with both it reaches the handler.
CASES = {(): "rbac", ("create",): "rbac", ("get",): "create check", ("create", "get"): "past authorization"}


def verdict(answer: tuple[int, str]) -> str:
    status, message = answer
    if status == 403:
        return "rbac" if 'cannot get resource "pods/exec"' in message else "create check"
    return "past authorization" if status == 400 and "does not have a host assigned" in message else f"{answer}"


async def test_a_websocket_exec_needs_create_beside_get(control_plane: ControlPlane, kube: KubeClient,
                                                        namespace: str) -> None:
    await kube.create(PODS, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD},
                                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    seen = {}
    for verbs in CASES:
        token = await account_token(kube, namespace, "exec-" + ("-".join(verbs) or "none"), list(verbs))
        answer = await websocket_exec(control_plane, namespace, token)
        print(f"\nWebSocket exec, pods/exec verbs {list(verbs)}: {answer}")
        seen[verbs] = verdict(answer)
    assert seen == CASES
