"""Exec launch against the real apiserver: each exec job's launcher access (ServiceAccount, Role, RoleBinding)
exists before its launcher pod, names exactly the job's pods once they exist (never a name held by another
owner's pod, nothing while suspended), follows a restart that renames the launcher, is judged by the real RBAC
authorizer to allow exec into the job's own workers only, no other job's pod runs as it, and it goes with the job
(the real garbage collector)."""

from __future__ import annotations

from typing import Any

from mpiop.api.raw import JSON
from mpiop.kube.client import MPIJOBS, PODS, ROLE_BINDINGS, ROLES, SECRETS, SERVICE_ACCOUNTS, Resource
from mpiop.names import LAUNCH_ANNOTATION
from testkit.operator import Cluster, Operator, eventually, mpijob, start_pods

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
    # etcd revisions: the ServiceAccount's and RoleBinding's resourceVersion is its creation's, the Role's its
    # update naming the workers once they existed, and every one is older than the launcher pod's.
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
    await start_pods(cluster, "lw", 1, running=False)
    await cluster.set_phase("lw-worker-0", "Failed", exit_code=1)
    await eventually(lambda: cluster.condition("lw", "Restarting"), what="Restarting")
    await eventually(lambda: cluster.pod("lw-launcher-1"), what="the next attempt's launcher")

    async def renamed() -> bool:  # a working launcher is named once it exists: the pass after its creation
        role = await cluster.kube.get(ROLES, cluster.ns, "lw-launcher")
        return bool(role["rules"]) and role["rules"][1]["resourceNames"] == ["lw-launcher-1", "lw-worker-0"]

    await eventually(renamed, what="the Role to name lw-launcher-1 and lw-worker-0")
    assert await may_exec(cluster, "lw-launcher", "lw-launcher-1")
    assert not await may_exec(cluster, "lw-launcher", "lw-launcher")  # the failed attempt's, kept for its log


def plain_pod(name: str) -> JSON:
    """A pod of no MPIJob (as a PyTorchJob's `train-worker-0` would be to mpiop): no owner, no mpiop label."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}


async def can_i(cluster: Cluster, account: str, pods: list[str]) -> dict[str, bool]:
    """`kubectl auth can-i --as=system:serviceaccount:<ns>:<account> create pods/exec/<pod>` for each pod,
    printed as kubectl would answer."""
    verdicts = {pod: await may_exec(cluster, account, pod) for pod in pods}
    for pod, allowed in verdicts.items():
        print(f"can-i --as=system:serviceaccount:{cluster.ns}:{account} create pods/exec/{pod}:",
              "yes" if allowed else "no")
    return verdicts


async def test_a_suspended_exec_job_grants_nothing_not_even_a_pod_named_like_its_worker(
        cluster: Cluster, operator: Operator) -> None:
    await cluster.kube.create(PODS, cluster.ns, plain_pod("train-worker-0"))
    await cluster.create_job(exec_job("train", 2, runPolicy={"suspend": True}))
    await eventually(lambda: cluster.condition("train", "Suspended"), what="train Suspended")
    await eventually(lambda: cluster.kube.get_or_none(ROLE_BINDINGS, cluster.ns, "train-launcher"),
                     what="train's launcher access")
    await operator.settle()
    verdicts = await can_i(cluster, "train-launcher", ["train-worker-0", "train-worker-1", "train-launcher"])
    assert verdicts == {"train-worker-0": False, "train-worker-1": False, "train-launcher": False}
    role = await cluster.kube.get(ROLES, cluster.ns, "train-launcher")
    assert role.get("rules") in (None, [])  # no rule at all: one without resourceNames would grant every pod
    assert set(await cluster.pods()) == {"train-worker-0"}


async def test_an_exec_job_may_exec_into_its_own_workers_never_into_another_owners_pod_of_a_worker_name(
        cluster: Cluster, operator: Operator) -> None:
    for name in ("run-worker-1", "run-worker-2"):  # a name the job needs, and one beyond its count
        await cluster.kube.create(PODS, cluster.ns, plain_pod(name))
    await cluster.create_job(exec_job("run", 2))
    taken = await eventually(lambda: cluster.condition("run", "ReplicaFailure"), what="run's ReplicaFailure")
    assert taken["reason"] == "ErrResourceExists" and "Pod run-worker-1" in taken["message"], taken
    await eventually(lambda: cluster.pod("run-worker-0"), what="run's own worker 0")
    await operator.settle()
    print("while run-worker-1 is another owner's pod:")
    verdicts = await can_i(cluster, "run-launcher", ["run-worker-0", "run-worker-1", "run-worker-2"])
    assert verdicts == {"run-worker-0": True, "run-worker-1": False, "run-worker-2": False}
    role = await cluster.kube.get(ROLES, cluster.ns, "run-launcher")
    assert [r["resourceNames"] for r in role["rules"]] == [["run-worker-0"], ["run-worker-0"]]
    assert await cluster.pod("run-launcher") is None  # not while a worker's name is taken

    await cluster.kube.delete(PODS, cluster.ns, "run-worker-1", grace_period_seconds=0)  # the squatter goes

    async def own_worker_1() -> JSON | None:
        pod = await cluster.pod("run-worker-1")
        return pod if pod and pod["metadata"].get("ownerReferences") else None

    await eventually(own_worker_1, timeout=90, what="run's own worker 1, once the name is free")
    await eventually(lambda: cluster.pod("run-launcher"), what="run's launcher")
    role = await cluster.kube.get(ROLES, cluster.ns, "run-launcher")
    assert role["rules"][1]["resourceNames"] == ["run-worker-0", "run-worker-1"]  # before the launcher was made
    await cluster.run_all(["run-worker-0", "run-worker-1", "run-launcher"])
    await eventually(lambda: cluster.condition("run", "Running"), what="run Running")
    print("once run's own run-worker-1 runs:")
    verdicts = await can_i(cluster, "run-launcher", ["run-worker-0", "run-worker-1", "run-worker-2"])
    assert verdicts == {"run-worker-0": True, "run-worker-1": True, "run-worker-2": False}


async def test_no_pod_of_another_job_runs_as_an_exec_launchers_account(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(exec_job("train", 1))
    await eventually(lambda: cluster.pod("train-launcher"), what="train's launcher pod")
    thief = mpijob("thief", workers=1)  # SSH launch, the operator's default
    thief["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] = "train-launcher"
    await cluster.create_job(thief)
    failed = await eventually(lambda: cluster.condition("thief", "Failed"), what="thief Failed")
    print("thief's Failed condition:", failed["reason"], failed["message"])
    assert failed["reason"] == "ValidationError"
    assert ("spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName: 'train-launcher' is MPIJob 'train''s "
            "exec launcher account") in failed["message"]
    await operator.settle()
    assert [p for p in await cluster.pods() if p.startswith("thief")] == []
    events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
    warnings = [(e["type"], e["reason"]) for e in events["items"] if e["involvedObject"]["name"] == "thief"]
    assert ("Warning", "ValidationError") in warnings, warnings
