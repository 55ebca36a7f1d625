"""Exec launch against the real apiserver: each exec job's launcher access (ServiceAccount, Role, RoleBinding)
exists before its launcher pod, names exactly the job's pods, follows a restart that renames the launcher, is
judged by the real RBAC authorizer to allow exec into the job's own workers only, and goes with the job (the
real garbage collector)."""

from __future__ import annotations

from typing import Any

from mpiop.api.raw import JSON
from mpiop.desired.launch import LAUNCH_ANNOTATION
from mpiop.kube.client import MPIJOBS, ROLE_BINDINGS, ROLES, SECRETS, SERVICE_ACCOUNTS, Resource
from testkit.operator import Cluster, Operator, eventually, mpijob

ACCESS: tuple[Resource, ...] = (SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS)


def exec_job(name: str, workers: int, **spec: Any) -> JSON:
    manifest = mpijob(name, workers=workers, **spec)
    manifest["metadata"].setdefault("annotations", {})[LAUNCH_ANNOTATION] = "exec"
    return manifest


async def may_exec(cluster: Cluster, account: str, pod: str) -> bool:
    """What the apiserver's authorizer answers for `account` opening an exec session in `pod`."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{cluster.ns}:{account}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{cluster.ns}"],
                       "resourceAttributes": {"namespace": cluster.ns, "verb": "create", "resource": "pods",
                                              "subresource": "exec", "name": pod}}}
    answer = await cluster.kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


async def test_launcher_access_is_made_first_names_exactly_the_job_and_goes_with_it(cluster: Cluster,
                                                                                     operator: Operator) -> None:
    await cluster.create_job(exec_job("ex", 2))
    await cluster.create_job(exec_job("other", 1))
    launcher = await eventually(lambda: cluster.pod("ex-launcher"), what="ex's launcher pod")
    await eventually(lambda: cluster.pod("other-launcher"), what="other's launcher pod")
    made = [await cluster.kube.get(kind, cluster.ns, "ex-launcher") for kind in ACCESS]
    # etcd revisions: each object's resourceVersion is its creation's (none was changed since), and every one
    # is older than the launcher pod's.
    assert all(int(obj["metadata"]["resourceVersion"]) < int(launcher["metadata"]["resourceVersion"])
               for obj in made), [(o["kind"], o["metadata"]["resourceVersion"]) for o in [*made, launcher]]
    role = made[1]
    assert [(r["resources"], r["resourceNames"], r["verbs"]) for r in role["rules"]] == [
        (["pods"], ["ex-worker-0", "ex-worker-1"], ["get"]),
        (["pods/exec"], ["ex-worker-0", "ex-worker-1"], ["create", "get"]),
    ]
    assert made[2]["subjects"] == [{"kind": "ServiceAccount", "name": "ex-launcher", "namespace": cluster.ns}]
    assert await cluster.kube.get_or_none(SECRETS, cluster.ns, "ex-ssh") is None  # no SSH key under exec
    verdicts = {pod: await may_exec(cluster, "ex-launcher", pod)
                for pod in ("ex-worker-0", "ex-worker-1", "ex-launcher", "other-worker-0", "other-launcher")}
    print("authorizer, ex-launcher exec into:", verdicts)
    assert verdicts == {"ex-worker-0": True, "ex-worker-1": True, "ex-launcher": False, "other-worker-0": False,
                        "other-launcher": False}

    await cluster.kube.delete(MPIJOBS, cluster.ns, "ex", propagation="Background")

    async def collected() -> bool:
        return all([await cluster.kube.get_or_none(kind, cluster.ns, "ex-launcher") is None for kind in ACCESS])

    await eventually(collected, timeout=60, what="the garbage collector to delete ex's launcher access")
    assert await cluster.kube.get_or_none(ROLES, cluster.ns, "other-launcher") is not None


async def test_a_restart_renames_the_working_launcher_in_its_role(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(exec_job("lw", 1, runLauncherAsWorker=True))
    await eventually(lambda: cluster.pod("lw-launcher"), what="lw's launcher pod")
    await cluster.run_all(["lw-launcher", "lw-worker-0"])
    await cluster.set_phase("lw-worker-0", "Failed", exit_code=1)
    await eventually(lambda: cluster.condition("lw", "Restarting"), what="Restarting")
    launcher = await eventually(lambda: cluster.pod("lw-launcher-1"), what="the next attempt's launcher")

    async def renamed() -> JSON | None:
        role = await cluster.kube.get(ROLES, cluster.ns, "lw-launcher")
        return role if role["rules"][1]["resourceNames"] == ["lw-launcher-1", "lw-worker-0"] else None

    role = await eventually(renamed, what="lw's Role to name the next attempt's launcher")
    # etcd revisions: nothing changes the new launcher pod after its creation (no kubelet here), so its
    # resourceVersion is its creation's, and the Role's patch is older: the pod never existed unnamed.
    assert int(role["metadata"]["resourceVersion"]) < int(launcher["metadata"]["resourceVersion"]), (
        role["metadata"]["resourceVersion"], launcher["metadata"]["resourceVersion"])
    assert await may_exec(cluster, "lw-launcher", "lw-launcher-1")
    assert not await may_exec(cluster, "lw-launcher", "lw-launcher")  # the failed attempt's, kept for its log
