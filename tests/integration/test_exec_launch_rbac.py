"""Exec launch against the real apiserver: each exec job's launcher access (ServiceAccount, Role, RoleBinding)
exists before its launcher pod, names exactly the job's pods once they exist (never a name held by another
owner's pod, nothing while suspended), follows a restart that renames the launcher, is judged by the real RBAC
authorizer to allow exec into the job's own workers only, no other job's pod runs as it, and it goes with the job
(the real garbage collector). No deputy: the access is named from the job's uid, so an admin's Role and bindings
for `<job>-launcher` never reach the launcher; a Role squatting the real name is reported and never bound; an
upgraded job's old-named Role keeps naming exactly its pods."""

from __future__ import annotations

from typing import Any

from devcluster.controlplane import ControlPlane
from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import launcher_rbac
from mpiop.kube.client import MPIJOBS, PODS, ROLE_BINDINGS, ROLES, SECRETS, SERVICE_ACCOUNTS, Resource
from mpiop.names import LAUNCH_ANNOTATION
from testkit.operator import Cluster, Operator, eventually, mpijob, running_operator, start_pods

ACCESS: tuple[Resource, ...] = (SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS)


def exec_job(name: str, workers: int, **spec: Any) -> JSON:
    manifest = mpijob(name, workers=workers, **spec)
    manifest["metadata"].setdefault("annotations", {})[LAUNCH_ANNOTATION] = "exec"
    return manifest


async def allowed(cluster: Cluster, account: str, verb: str, resource: str, **attributes: str) -> bool:
    """What the apiserver's authorizer answers for `account` (`kubectl auth can-i VERB RESOURCE
    --as=system:serviceaccount:<ns>:<account>`, with a service account's groups), in the test's namespace."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{cluster.ns}:{account}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{cluster.ns}"],
                       "resourceAttributes": {"namespace": cluster.ns, "verb": verb, "resource": resource,
                                              **attributes}}}
    answer = await cluster.kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


async def may_exec(cluster: Cluster, account: str, pod: str) -> bool:
    """What the apiserver's authorizer answers for `account` opening an exec session in `pod`."""
    return await allowed(cluster, account, "create", "pods", subresource="exec", name=pod)


async def access_name(cluster: Cluster, job: str) -> str:
    """The job's launcher account (and Role, RoleBinding) name, from its uid: names.launcher_account_name."""
    return names.launcher_account_name(MPIJob.model_validate(await cluster.kube.get(MPIJOBS, cluster.ns, job)))


async def test_launcher_access_is_made_first_names_exactly_the_job_and_goes_with_it(cluster: Cluster,
                                                                                     operator: Operator) -> None:
    await cluster.create_job(exec_job("ex", 2))
    await cluster.create_job(exec_job("other", 1))
    launcher = await eventually(lambda: cluster.pod("ex-launcher"), what="ex's launcher pod")
    await eventually(lambda: cluster.pod("other-launcher"), what="other's launcher pod")
    access = await access_name(cluster, "ex")
    made = [await cluster.kube.get(kind, cluster.ns, access) for kind in ACCESS]
    # etcd revisions: the ServiceAccount's and RoleBinding's resourceVersion is its creation's, the Role's its
    # update naming the workers once they existed, and every one is older than the launcher pod's.
    assert all(int(obj["metadata"]["resourceVersion"]) < int(launcher["metadata"]["resourceVersion"])
               for obj in made), [(o["kind"], o["metadata"]["resourceVersion"]) for o in [*made, launcher]]
    role = made[1]
    assert [(r["resources"], r["resourceNames"], r["verbs"]) for r in role["rules"]] == [
        (["pods"], ["ex-worker-0", "ex-worker-1"], ["get"]),
        (["pods/exec"], ["ex-worker-0", "ex-worker-1"], ["create", "get"]),
    ]
    assert made[2]["subjects"] == [{"kind": "ServiceAccount", "name": access, "namespace": cluster.ns}]
    assert launcher["spec"]["serviceAccountName"] == access
    assert await cluster.kube.get_or_none(SECRETS, cluster.ns, "ex-ssh") is None  # no SSH key under exec
    verdicts = {pod: await may_exec(cluster, access, pod)
                for pod in ("ex-worker-0", "ex-worker-1", "ex-launcher", "other-worker-0", "other-launcher")}
    print(f"authorizer, {access} exec into:", verdicts)
    assert verdicts == {"ex-worker-0": True, "ex-worker-1": True, "ex-launcher": False, "other-worker-0": False,
                        "other-launcher": False}

    await cluster.kube.delete(MPIJOBS, cluster.ns, "ex", propagation="Background")

    async def collected() -> bool:
        return all([await cluster.kube.get_or_none(kind, cluster.ns, access) is None for kind in ACCESS])

    await eventually(collected, timeout=60, what="the garbage collector to delete ex's launcher access")
    assert await cluster.kube.get_or_none(ROLES, cluster.ns, await access_name(cluster, "other")) is not None


async def test_a_restart_renames_the_working_launcher_in_its_role(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(exec_job("lw", 1, runLauncherAsWorker=True))
    await start_pods(cluster, "lw", 1, running=False)
    await cluster.set_phase("lw-worker-0", "Failed", exit_code=1)
    await eventually(lambda: cluster.condition("lw", "Restarting"), what="Restarting")
    await eventually(lambda: cluster.pod("lw-launcher-1"), what="the next attempt's launcher")

    access = await access_name(cluster, "lw")

    async def renamed() -> bool:  # a working launcher is named once it exists: the pass after its creation
        role = await cluster.kube.get(ROLES, cluster.ns, access)
        return bool(role["rules"]) and role["rules"][1]["resourceNames"] == ["lw-launcher-1", "lw-worker-0"]

    await eventually(renamed, what="the Role to name lw-launcher-1 and lw-worker-0")
    assert await may_exec(cluster, access, "lw-launcher-1")
    assert not await may_exec(cluster, access, "lw-launcher")  # the failed attempt's, kept for its log


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
    access = await access_name(cluster, "train")
    await eventually(lambda: cluster.kube.get_or_none(ROLE_BINDINGS, cluster.ns, access),
                     what="train's launcher access")
    await operator.settle()
    verdicts = await can_i(cluster, access, ["train-worker-0", "train-worker-1", "train-launcher"])
    assert verdicts == {"train-worker-0": False, "train-worker-1": False, "train-launcher": False}
    role = await cluster.kube.get(ROLES, cluster.ns, access)
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
    access = await access_name(cluster, "run")
    print("while run-worker-1 is another owner's pod:")
    verdicts = await can_i(cluster, access, ["run-worker-0", "run-worker-1", "run-worker-2"])
    assert verdicts == {"run-worker-0": True, "run-worker-1": False, "run-worker-2": False}
    role = await cluster.kube.get(ROLES, cluster.ns, access)
    assert [r["resourceNames"] for r in role["rules"]] == [["run-worker-0"], ["run-worker-0"]]
    assert await cluster.pod("run-launcher") is None  # not while a worker's name is taken

    await cluster.kube.delete(PODS, cluster.ns, "run-worker-1", grace_period_seconds=0)  # the squatter goes

    async def own_worker_1() -> JSON | None:
        pod = await cluster.pod("run-worker-1")
        return pod if pod and pod["metadata"].get("ownerReferences") else None

    await eventually(own_worker_1, timeout=90, what="run's own worker 1, once the name is free")
    await eventually(lambda: cluster.pod("run-launcher"), what="run's launcher")
    role = await cluster.kube.get(ROLES, cluster.ns, access)
    assert role["rules"][1]["resourceNames"] == ["run-worker-0", "run-worker-1"]  # before the launcher was made
    await cluster.run_all(["run-worker-0", "run-worker-1", "run-launcher"])
    await eventually(lambda: cluster.condition("run", "Running"), what="run Running")
    print("once run's own run-worker-1 runs:")
    verdicts = await can_i(cluster, access, ["run-worker-0", "run-worker-1", "run-worker-2"])
    assert verdicts == {"run-worker-0": True, "run-worker-1": True, "run-worker-2": False}


async def test_no_pod_of_another_job_runs_as_an_exec_launchers_account(cluster: Cluster, operator: Operator) -> None:
    await cluster.create_job(exec_job("train", 1))
    await eventually(lambda: cluster.pod("train-launcher"), what="train's launcher pod")
    access = await access_name(cluster, "train")
    for thief, account in (("thief", access), ("legacy", "train-launcher"), ("self", "self-launcher")):
        job = mpijob(thief, workers=1)  # SSH launch, the operator's default: "self" names its own <job>-launcher
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] = account
        await cluster.create_job(job)
        failed = await eventually(lambda name=thief: cluster.condition(name, "Failed"),  # type: ignore[misc]
                                  what=f"{thief} Failed")
        print(f"{thief}'s Failed condition:", failed["reason"], failed["message"])
        assert failed["reason"] == "ValidationError"
        assert (f"spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName: {account!r} ends in '-launcher': "
                "accounts so named are reserved for mpiop's exec launchers") in failed["message"]
    await operator.settle()
    assert [p for p in await cluster.pods() if p.startswith(("thief", "legacy", "self"))] == []
    events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
    warnings = [(e["type"], e["reason"]) for e in events["items"] if e["involvedObject"]["name"] == "thief"]
    assert ("Warning", "ValidationError") in warnings, warnings


CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False)
LIST_SECRETS = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]


def rbac(kind: str, name: str, **fields: Any) -> JSON:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}, **fields}


def role_ref(kind: str, name: str) -> JSON:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


async def launcher_runs_as_its_own_access(cluster: Cluster, job: str, launcher: JSON) -> None:
    """The launcher pod runs as the job's account, whose ServiceAccount, Role and RoleBinding the job controls, the
    binding giving that Role to that account."""
    access = await access_name(cluster, job)
    assert launcher["spec"]["serviceAccountName"] == access
    uid = (await cluster.kube.get(MPIJOBS, cluster.ns, job))["metadata"]["uid"]
    made = [await cluster.kube.get(kind, cluster.ns, access) for kind in ACCESS]
    for obj in made:
        assert [r["uid"] for r in obj["metadata"]["ownerReferences"] if r.get("controller")] == [uid], obj
    assert made[2]["roleRef"] == role_ref("Role", access)
    assert made[2]["subjects"] == [{"kind": "ServiceAccount", "name": access, "namespace": cluster.ns}]


async def test_an_admins_role_and_bindings_for_job_launcher_never_reach_the_jobs_launcher(
        cluster: Cluster, operator: Operator) -> None:
    """An admin's Role `ops-launcher` granting list secrets, bound (RoleBinding `ops-launcher-legacy`, and `view` by
    a ClusterRoleBinding) to `system:serviceaccount:<ns>:ops-launcher` before exec job `ops` exists: the job's
    launcher account is its own, of another name, and gets none of it."""
    subject = [{"kind": "ServiceAccount", "name": "ops-launcher", "namespace": cluster.ns}]
    await cluster.kube.create(ROLES, cluster.ns, rbac("Role", "ops-launcher", rules=LIST_SECRETS))
    await cluster.kube.create(ROLE_BINDINGS, cluster.ns, rbac("RoleBinding", "ops-launcher-legacy", subjects=subject,
                                                              roleRef=role_ref("Role", "ops-launcher")))
    view = f"{cluster.ns}-ops-launcher-view"
    await cluster.kube.create(CLUSTER_ROLE_BINDINGS, None, rbac("ClusterRoleBinding", view, subjects=subject,
                                                                roleRef=role_ref("ClusterRole", "view")))
    try:
        await cluster.create_job(exec_job("ops", 1))
        access = await access_name(cluster, "ops")

        async def account_made() -> JSON | None:
            account = await cluster.kube.get_or_none(SERVICE_ACCOUNTS, cluster.ns, access)
            return account if account and account["metadata"].get("ownerReferences") else None

        await eventually(account_made, timeout=60, what=f"ops's launcher account {access}")
        verdicts = {what: await allowed(cluster, access, verb, resource) for what, verb, resource in (
            ("list secrets", "list", "secrets"), ("list configmaps (view)", "list", "configmaps"))}
        for what, answer in verdicts.items():
            print(f"can-i {what} --as=system:serviceaccount:{cluster.ns}:{access}:", "yes" if answer else "no")
        made_by_mpiop = {f"{kind.kind} ops-launcher": bool(obj and obj["metadata"].get("ownerReferences"))
                         for kind in (SERVICE_ACCOUNTS, ROLE_BINDINGS)
                         for obj in [await cluster.kube.get_or_none(kind, cluster.ns, "ops-launcher")]}
        print("made by mpiop:", made_by_mpiop)
        assert access != "ops-launcher"
        assert verdicts == {"list secrets": False, "list configmaps (view)": False}
        # The job runs under its own names: its launcher is made, as its own account, bound to its own Role.
        launcher = await eventually(lambda: cluster.pod("ops-launcher"), timeout=60, what="ops's launcher pod")
        await launcher_runs_as_its_own_access(cluster, "ops", launcher)
        assert await may_exec(cluster, access, "ops-worker-0")
        assert await cluster.condition("ops", "ReplicaFailure") is None
        # Nothing of the admin's is touched, and no account `ops-launcher` gives their bindings a holder.
        assert await cluster.kube.get_or_none(SERVICE_ACCOUNTS, cluster.ns, "ops-launcher") is None
        assert await cluster.kube.get_or_none(ROLE_BINDINGS, cluster.ns, "ops-launcher") is None
        admins = await cluster.kube.get(ROLES, cluster.ns, "ops-launcher")
        assert admins["rules"] == LIST_SECRETS and not admins["metadata"].get("ownerReferences")
    finally:
        await cluster.kube.delete(CLUSTER_ROLE_BINDINGS, None, view)


async def test_a_role_squatting_the_jobs_launcher_name_is_reported_and_never_bound(
        cluster: Cluster, control_plane: ControlPlane) -> None:
    """Someone who read the job's uid makes a Role of its launcher name before mpiop does (the job made while no
    operator runs, so mpiop cannot win the race): ReplicaFailure names that Role, no RoleBinding and no launcher
    exist; deleting the Role lets the job go on."""
    await cluster.create_job(exec_job("sq", 1))
    access = await access_name(cluster, "sq")
    await cluster.kube.create(ROLES, cluster.ns, rbac("Role", access, rules=LIST_SECRETS))
    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
        failure = await eventually(lambda: cluster.condition("sq", "ReplicaFailure"), timeout=60,
                                   what="sq's ReplicaFailure")
        print("sq's ReplicaFailure:", failure["reason"], failure["message"])
        assert failure["reason"] == "ErrResourceExists" and f"Role {access}" in failure["message"], failure
        await operator.settle()
        assert await cluster.kube.get_or_none(ROLE_BINDINGS, cluster.ns, access) is None
        assert await cluster.pods() == {}  # no pod while a name its access needs is taken: no launcher above all
        assert not await allowed(cluster, access, "list", "secrets")
        events = await cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.ns}/events")
        assert any(e["reason"] == "ErrResourceExists" and f"Role {access}" in e["message"]
                   for e in events["items"] if e["involvedObject"]["name"] == "sq"), events["items"]

        await cluster.kube.delete(ROLES, cluster.ns, access)
        launcher = await eventually(lambda: cluster.pod("sq-launcher"), timeout=90, what="sq's launcher, once free")
        await launcher_runs_as_its_own_access(cluster, "sq", launcher)
        role = await cluster.kube.get(ROLES, cluster.ns, access)
        assert [r["resources"] for r in role["rules"]] == [["pods"], ["pods/exec"]]  # mpiop's, not the squatter's
        assert not await allowed(cluster, access, "list", "secrets")
        assert await may_exec(cluster, access, "sq-worker-0")


async def test_an_upgraded_jobs_legacy_role_keeps_naming_exactly_its_pods(
        cluster: Cluster, control_plane: ControlPlane) -> None:
    """A job started by mpiop before uid-derived names has its launcher running as `<job>-launcher`, bound to the
    Role of that name: once upgraded, mpiop makes the job's access under the new names beside it and keeps the old
    Role naming exactly the job's pods (here: a scale-down drops a worker from both), never more."""
    job = MPIJob.model_validate(await cluster.create_job(exec_job("up", 2)))
    legacy = names.legacy_launcher_account_name(job)
    # What the earlier mpiop made: the Role, owned by the job, labelled, naming pods that do not exist (yet).
    await cluster.kube.create(ROLES, cluster.ns, launcher_rbac.role(job, ["up-worker-0", "up-worker-1"], legacy))
    binding = launcher_rbac.role_binding(job)
    await cluster.kube.create(ROLE_BINDINGS, cluster.ns, {
        **binding, "metadata": {**binding["metadata"], "name": legacy}, "roleRef": role_ref("Role", legacy),
        "subjects": [{"kind": "ServiceAccount", "name": legacy, "namespace": cluster.ns}]})
    async with running_operator(str(control_plane.kubeconfig), cluster.ns) as operator:
        launcher = await eventually(lambda: cluster.pod("up-launcher"), timeout=60, what="up's launcher pod")
        await launcher_runs_as_its_own_access(cluster, "up", launcher)

        async def legacy_names(wanted: list[str]) -> bool:
            role = await cluster.kube.get(ROLES, cluster.ns, legacy)
            return launcher_rbac.granted(role) == wanted

        await eventually(lambda: legacy_names(["up-worker-0", "up-worker-1"]), what="the legacy Role naming both")
        spec = {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}}
        await cluster.kube.patch(MPIJOBS, cluster.ns, "up", spec, patch_type="merge")
        await eventually(lambda: legacy_names(["up-worker-0"]), timeout=60, what="the legacy Role, scaled down")
        await operator.settle()
        assert launcher_rbac.granted(await cluster.kube.get(ROLES, cluster.ns, await access_name(cluster, "up"))) \
            == ["up-worker-0"]
        verdicts = await can_i(cluster, legacy, ["up-worker-0", "up-worker-1"])
        assert verdicts == {"up-worker-0": True, "up-worker-1": False}  # its running launcher keeps its worker
