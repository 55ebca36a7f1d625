"""mpiop.desired.launcher_rbac and its place in ensure and decide: an exec launcher may exec into exactly its job's
pods, and only once each exists: a name is never granted ahead of the job's own pod of that name."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.desired import ensure, hostnetwork, launcher_rbac
from mpiop.desired.settings import Settings
from mpiop.names import LAUNCH_ANNOTATION
from mpiop.plan import Observed, Plan, Refusal
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import make_pod, observe

EXEC = Settings(default_launch="exec")
ACCESS = "pi-uidpi-launcher"  # names.launcher_account_name of make_mpijob("pi") (uid "uid-pi")


def supporting(builder: MPIJobBuilder, observed: Observed | None = None, settings: Settings = EXEC,
               restarts: int = 0) -> Plan:
    job = builder.status(restart_count=restarts).obj() if restarts else builder.obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    ensure.supporting_objects(plan, job, observed or Observed(), hostnetwork.NO_PORTS, settings)
    return plan


def kinds(plan: Plan) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in plan.objects_to_create]


def with_access(job: MPIJob, pods: list[JSON], role: JSON | None) -> Observed:
    """The cache holding these pods and the job's launcher access, its Role as given."""
    return Observed(pods=pods, service_account=launcher_rbac.service_account(job), role=role,
                    role_binding=launcher_rbac.role_binding(job))


def rules_for(targets: list[str]) -> list[dict[str, Any]]:
    return [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": targets, "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": targets, "verbs": ["create", "get"]},
    ]


def someone_elses(pod: JSON) -> JSON:
    """The same pod controlled by another owner (the caches would not hold it: checked anyway)."""
    pod["metadata"]["ownerReferences"] = [{"kind": "PyTorchJob", "name": "pi", "uid": "uid-pytorchjob",
                                           "controller": True}]
    return pod


PI3 = make_mpijob("pi").workers(3)
PI_LW = make_mpijob("pi").workers(1).launcher_as_worker()
# (job, attempt, its pods in the cache, what the Role names)
CASES: list[tuple[MPIJobBuilder, int, list[JSON], list[str]]] = [
    (PI3, 0, [], []),
    (PI3, 0, [make_pod(PI3, "worker", i).obj() for i in range(3)], ["pi-worker-0", "pi-worker-1", "pi-worker-2"]),
    (PI3, 0, [make_pod(PI3, "worker", 2).obj(), make_pod(PI3, "worker", 0).obj()], ["pi-worker-0", "pi-worker-2"]),
    (PI3, 0, [make_pod(PI3, "worker", 0).obj(), make_pod(PI3, "worker", 3).obj()], ["pi-worker-0"]),
    (PI3, 0, [make_pod(PI3, "launcher").obj()], []),
    (PI3, 0, [make_pod(PI3, "worker", 0).terminating().obj(), make_pod(PI3, "worker", 1).obj()], ["pi-worker-1"]),
    (PI_LW, 0, [make_pod(PI_LW, "launcher").terminating().obj(), make_pod(PI_LW, "worker", 0).obj()],
     ["pi-worker-0"]),
    (PI3, 1, [make_pod(PI3, "worker", 0, attempt=0).obj(), make_pod(PI3, "worker", 1, attempt=1).obj()],
     ["pi-worker-1"]),
    (PI3, 0, [someone_elses(make_pod(PI3, "worker", 0).obj()), make_pod(PI3, "worker", 1).obj()], ["pi-worker-1"]),
    (PI3, 0, [make_pod(make_mpijob("pi").workers(3).uid("uid-an-earlier-pi"), "worker", 0).obj()], []),
    (PI_LW, 0, [make_pod(PI_LW, "worker", 0).obj()], ["pi-worker-0"]),
    (PI_LW, 0, [make_pod(PI_LW, "launcher").obj(), make_pod(PI_LW, "worker", 0).obj()],
     ["pi-launcher", "pi-worker-0"]),
    (PI_LW, 2, [make_pod(PI_LW, "launcher", attempt=1).obj(), make_pod(PI_LW, "launcher", attempt=2).obj(),
                make_pod(PI_LW, "worker", 0, attempt=2).obj()], ["pi-launcher-2", "pi-worker-0"]),
]
IDS = ["no-pod-yet", "every-worker", "some-workers-in-order", "not-beyond-the-count", "launcher-not-working",
       "not-a-terminating-worker", "not-a-terminating-working-launcher",
       "only-this-attempt", "not-another-owners-pod", "not-an-earlier-job-of-the-same-name",
       "working-launcher-not-yet-made", "working-launcher-made", "working-launcher-of-a-later-attempt"]


@pytest.mark.parametrize(("builder", "attempt", "pods", "targets"), CASES, ids=IDS)
def test_the_role_names_only_pods_of_the_attempt_that_exist_and_the_job_controls(
        builder: MPIJobBuilder, attempt: int, pods: list[JSON], targets: list[str]) -> None:
    job = builder.obj()
    assert launcher_rbac.exec_targets(job, Observed(pods=pods), attempt) == targets
    role = launcher_rbac.role(job, targets)
    assert role["metadata"]["name"] == ACCESS
    assert role["rules"] == (rules_for(targets) if targets else [])
    assert launcher_rbac.named_pods(role) == set(targets)


@pytest.mark.parametrize("targets", [[], ["pi-worker-0"]])
def test_no_rule_ever_has_an_empty_resource_names_which_would_grant_every_pod(targets: list[str]) -> None:
    rules = launcher_rbac.role(make_mpijob("pi").obj(), targets)["rules"]
    assert all(rule["resourceNames"] for rule in rules)
    assert len(rules) == (2 if targets else 0)


def test_the_binding_gives_the_role_to_the_launcher_account_only() -> None:
    job = make_mpijob("pi", "ml").obj()
    binding = launcher_rbac.role_binding(job)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCESS}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCESS, "namespace": "ml"}]
    for obj in (binding, launcher_rbac.role(job, []), launcher_rbac.service_account(job)):
        assert obj["metadata"]["ownerReferences"][0]["controller"] is True


@pytest.mark.parametrize(("builder", "settings", "wanted", "ssh_secret"), [
    (make_mpijob("pi"), EXEC, [f"ServiceAccount/{ACCESS}", f"Role/{ACCESS}"], False),
    (make_mpijob("pi").annotation(LAUNCH_ANNOTATION, "exec"), Settings(),
     [f"ServiceAccount/{ACCESS}", f"Role/{ACCESS}"], False),
    (make_mpijob("pi"), Settings(), [], True),
    (make_mpijob("pi").annotation(LAUNCH_ANNOTATION, "ssh"), EXEC, [], True),
], ids=["default-exec", "annotated-exec", "ssh", "annotated-ssh"])
def test_exec_jobs_get_launcher_access_instead_of_an_ssh_key(builder: MPIJobBuilder, settings: Settings,
                                                             wanted: list[str], ssh_secret: bool) -> None:
    plan = supporting(builder, settings=settings)
    assert [k for k in kinds(plan) if not k.startswith(("Service/", "ConfigMap/"))] == wanted
    assert plan.create_ssh_secret is ssh_secret
    roles = [o for o in plan.objects_to_create if o["kind"] == "Role"]
    assert [r["rules"] for r in roles] == ([[]] if wanted else [])  # made before any pod: it grants nothing


def test_the_role_follows_the_pods_and_the_job_is_looked_at_again_once_it_changed() -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    workers = [make_pod(job, "worker", i).obj() for i in range(2)]
    before = supporting(builder, with_access(job, workers, launcher_rbac.role(job, [])))
    [updated] = before.objects_to_update
    assert updated["kind"] == "Role" and updated["rules"] == rules_for(["pi-worker-0", "pi-worker-1"])
    assert before.requeue_after == 0  # the launcher waits for this Role (policies/launcher_creation)
    settled = supporting(builder, with_access(job, workers, updated))
    assert (settled.objects_to_update, settled.requeue_after) == ([], None)
    gone = supporting(builder, with_access(job, workers[1:], updated))  # worker 0 deleted
    assert [u["rules"] for u in gone.objects_to_update] == [rules_for(["pi-worker-1"])]


def test_a_later_attempt_of_a_working_launcher_renames_it_in_the_role_once_it_exists() -> None:
    builder = make_mpijob("pi").workers(1).launcher_as_worker()
    job = builder.obj()
    first = [make_pod(job, "launcher").obj(), make_pod(job, "worker", 0).obj()]
    role = launcher_rbac.role(job, ["pi-launcher", "pi-worker-0"])
    assert supporting(builder, with_access(job, first, role)).objects_to_update == []
    second = [make_pod(job, "launcher").obj(), make_pod(job, "worker", 0, attempt=1).obj()]
    [updated] = supporting(builder, with_access(job, second, role), restarts=1).objects_to_update
    assert updated["rules"][0]["resourceNames"] == ["pi-worker-0"]  # the attempt's launcher is not made yet
    second.append(make_pod(job, "launcher", attempt=1).obj())
    [renamed] = supporting(builder, with_access(job, second, updated), restarts=1).objects_to_update
    assert renamed["rules"][0]["resourceNames"] == ["pi-launcher-1", "pi-worker-0"]


def role_updates(plan: Plan) -> list[JSON]:
    return [o for o in plan.objects_to_update if o["kind"] == "Role"]


def exec_pass(job_builder: MPIJobBuilder, observed: Observed) -> Plan:
    job = job_builder.obj()
    return decide(job, observed, at(1), EXEC)


def test_an_exec_job_makes_its_launcher_only_once_its_role_names_every_worker() -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    first = exec_pass(builder, observe(job))
    assert [k for k in kinds(first) if k.startswith(("Role", "Pod"))] == [
        f"Role/{ACCESS}", "Pod/pi-worker-0", "Pod/pi-worker-1"]  # no binding before its account and Role are seen
    assert first.objects_to_create[1]["rules"] == [] and first.requeue_after == 0
    workers = [make_pod(job, "worker", i).obj() for i in range(2)]
    observed = observe(job, workers)
    observed.role = first.objects_to_create[1]
    observed.service_account = launcher_rbac.service_account(job)
    bound = exec_pass(builder, observed)
    assert kinds(bound) == [f"RoleBinding/{ACCESS}"] and bound.requeue_after == 0
    observed.role_binding = bound.objects_to_create[0]
    second = exec_pass(builder, observed)
    assert kinds(second) == [] and second.requeue_after == 0
    [role] = role_updates(second)
    observed.role = role
    third = exec_pass(builder, observed)
    assert kinds(third) == ["Pod/pi-launcher"] and role_updates(third) == []


def test_a_worker_name_taken_by_another_owner_is_never_in_the_role_and_holds_the_launcher() -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    observed = observe(job, [make_pod(job, "worker", 1).obj()])
    observed.service_account, observed.role = launcher_rbac.service_account(job), launcher_rbac.role(job, [])
    observed.role_binding = launcher_rbac.role_binding(job)
    observed.refused = [Refusal("Pod", "pi-worker-0", 409, "AlreadyExists", 'pods "pi-worker-0" already exists')]
    plan = exec_pass(builder, observed)
    assert [u["rules"] for u in role_updates(plan)] == [rules_for(["pi-worker-1"])]
    assert kinds(plan) == ["Pod/pi-worker-0"]  # retried; no launcher
    failure = plan.status.condition("ReplicaFailure")
    assert failure is not None and failure.reason == "ErrResourceExists"
    assert "Pod pi-worker-0" in (failure.message or "")
    observed.role = role_updates(plan)[0]
    again = exec_pass(builder, observed)
    assert kinds(again) == ["Pod/pi-worker-0"] and role_updates(again) == []
    assert again.requeue_after is not None and again.requeue_after >= 1  # the refusal's backoff, no busy loop


def test_a_suspended_exec_job_has_a_role_that_grants_nothing() -> None:
    builder = make_mpijob("train").workers(2).suspend()
    plan = exec_pass(builder, observe(builder.obj()))
    [role] = [o for o in plan.objects_to_create if o["kind"] == "Role"]
    assert role["rules"] == [] and plan.creation_steps.pods() == []


def test_an_ssh_job_is_not_looked_at_again_for_a_role() -> None:
    builder = make_mpijob("pi").workers(2)
    plan = decide(builder.obj(), observe(builder.obj()), at(1), Settings())
    assert "Pod/pi-launcher" in kinds(plan) and plan.requeue_after is None


def test_a_pod_is_dropped_from_the_role_as_soon_as_it_is_terminating_not_once_it_is_gone() -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    both = launcher_rbac.role(job, ["pi-worker-0", "pi-worker-1"])
    going = [make_pod(job, "worker", 0).terminating().obj(), make_pod(job, "worker", 1).obj()]
    [updated] = supporting(builder, with_access(job, going, both)).objects_to_update
    assert updated["rules"] == rules_for(["pi-worker-1"])


def another_owners(obj: JSON) -> JSON:
    """An object of the launcher access's name that someone else made (the caches would not hold it: checked)."""
    obj = {**obj, "metadata": {**obj["metadata"], "ownerReferences": []}}
    return obj


def taken(kind: str) -> Refusal:
    return Refusal(kind, ACCESS, 409, "AlreadyExists", f'{kind.lower()}s "{ACCESS}" already exists')


# (what the cache holds of the account, Role and RoleBinding: "own", "another's" or None; the refusal of the last
#  pass; what this pass creates of the access and pods; whether ReplicaFailure names a squatter)
ACCESS_CASES: list[tuple[str | None, str | None, str | None, str | None, list[str], str | None]] = [
    (None, None, None, None, [f"ServiceAccount/{ACCESS}", f"Role/{ACCESS}"], None),
    ("own", None, None, None, [f"Role/{ACCESS}"], None),
    (None, "own", None, None, [f"ServiceAccount/{ACCESS}"], None),
    ("own", "own", None, None, [f"RoleBinding/{ACCESS}"], None),
    ("own", "own", "own", None, ["Pod/pi-launcher"], None),
    ("own", None, None, "Role", [f"Role/{ACCESS}"], f"Role {ACCESS}"),
    (None, "own", None, "ServiceAccount", [f"ServiceAccount/{ACCESS}"], f"ServiceAccount {ACCESS}"),
    ("own", "own", None, "RoleBinding", [f"RoleBinding/{ACCESS}"], f"RoleBinding {ACCESS}"),
    ("another's", "own", None, None, [f"ServiceAccount/{ACCESS}"], None),
    ("own", "another's", None, None, [f"Role/{ACCESS}"], None),
    ("own", "own", "another's", None, [f"RoleBinding/{ACCESS}"], None),
]


@pytest.mark.parametrize(("account", "role", "binding", "refused", "made", "squatter"), ACCESS_CASES, ids=[
    "nothing-yet", "account-only", "role-only", "both-bound-now", "all-own-launcher", "role-taken",
    "account-taken", "binding-taken", "anothers-account-cached", "anothers-role-cached", "anothers-binding-cached"])
def test_the_binding_and_the_launcher_only_once_account_and_role_are_the_jobs_own(
        account: str | None, role: str | None, binding: str | None, refused: str | None, made: list[str],
        squatter: str | None) -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    workers = [make_pod(job, "worker", i).obj() for i in range(2)]
    observed = observe(job, workers)
    cached = {"own": lambda o: o, "another's": another_owners}
    for attr, state, obj in (("service_account", account, launcher_rbac.service_account(job)),
                             ("role", role, launcher_rbac.role(job, ["pi-worker-0", "pi-worker-1"])),
                             ("role_binding", binding, launcher_rbac.role_binding(job))):
        setattr(observed, attr, None if state is None else cached[state](obj))
    observed.refused = [taken(refused)] if refused else []
    plan = exec_pass(builder, observed)
    assert kinds(plan) == made
    failure = plan.status.condition("ReplicaFailure")
    if squatter is None:
        assert failure is None or failure.status == "False"
        assert plan.requeue_after == 0  # made now: bound, launched (or, a launcher made, named) the next pass
    else:
        assert failure is not None and (failure.status, failure.reason) == ("True", "ErrResourceExists")
        assert squatter in (failure.message or "")
        assert plan.requeue_after is not None and plan.requeue_after >= 1  # the refusal's backoff, no busy loop


# An upgrade: a job started when the access was named `<job>-launcher`, its launcher running as that account.
LEGACY = "pi-launcher"


def legacy_role(job: MPIJob, targets: list[str], owned: bool = True) -> JSON:
    role = launcher_rbac.role(job, targets, LEGACY)
    return role if owned else another_owners(role)


@pytest.mark.parametrize(("pods", "legacy", "updated"), [
    (["worker-0", "worker-1", "launcher"], ["pi-worker-0", "pi-worker-1"], None),
    (["worker-1", "launcher"], ["pi-worker-0", "pi-worker-1"], ["pi-worker-1"]),
    (["terminating-worker-0", "worker-1", "launcher"], ["pi-worker-0", "pi-worker-1"], ["pi-worker-1"]),
    (["worker-0", "worker-1", "launcher"], ["pi-worker-0"], ["pi-worker-0", "pi-worker-1"]),
    (["worker-1", "launcher"], None, None),
], ids=["in-step", "a-worker-gone", "a-worker-terminating", "a-worker-replaced", "another-owners-is-left-alone"])
def test_an_upgraded_job_keeps_its_running_launcher_and_its_legacy_role_names_only_its_pods(
        pods: list[str], legacy: list[str] | None, updated: list[str] | None) -> None:
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    made = {"worker-0": make_pod(job, "worker", 0), "worker-1": make_pod(job, "worker", 1),
            "terminating-worker-0": make_pod(job, "worker", 0).terminating(), "launcher": make_pod(job, "launcher")}
    observed = observe(job, [made[p].running().obj() for p in pods])
    observed.legacy_role = legacy_role(job, ["pi-worker-0", "pi-worker-1"] if legacy is None else legacy,
                                       owned=legacy is not None)
    plan = exec_pass(builder, observed)
    # The new access is made under the new names beside it; the running launcher is neither deleted nor made again.
    assert [k for k in kinds(plan) if not k.startswith("Pod/pi-worker")] == [f"ServiceAccount/{ACCESS}",
                                                                              f"Role/{ACCESS}"]
    assert [p["metadata"]["name"] for p in plan.pods_to_delete if not podstate_terminating(p)] == []
    legacy_updates = [u for u in plan.objects_to_update if u["metadata"]["name"] == LEGACY]
    if updated is None:
        assert legacy_updates == []
    else:
        assert [u["rules"] for u in legacy_updates] == [rules_for(updated)]


def podstate_terminating(pod: JSON) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def test_the_launcher_of_an_upgraded_jobs_next_attempt_runs_as_the_new_account() -> None:
    builder = make_mpijob("pi").workers(1).status(restart_count=1)
    job = builder.obj()
    observed = observe(job, [make_pod(job, "worker", 0, attempt=1).running().obj()])
    observed.legacy_role = legacy_role(job, ["pi-worker-0"])
    observed.service_account = launcher_rbac.service_account(job)
    observed.role_binding = launcher_rbac.role_binding(job)
    observed.role = launcher_rbac.role(job, ["pi-worker-0"])
    [launcher] = [o for o in exec_pass(builder, observed).objects_to_create if o["kind"] == "Pod"]
    assert launcher["metadata"]["name"] == "pi-launcher-1" and launcher["spec"]["serviceAccountName"] == ACCESS


@pytest.mark.parametrize(("suspended", "worker_replicas", "legacy", "roles"), [
    (True, 2, False, {ACCESS: []}),
    (False, 1, False, {ACCESS: ["pi-worker-0"]}),
    (True, 2, True, {ACCESS: [], LEGACY: []}),
    (False, 2, False, {}),
], ids=["suspended", "scaled-down", "suspended-upgraded", "nothing-deleted"])
def test_the_pods_a_pass_deletes_leave_the_role_in_that_pass_before_their_deletion(
        suspended: bool, worker_replicas: int, legacy: bool, roles: dict[str, list[str]]) -> None:
    builder = make_mpijob("pi").workers(worker_replicas)
    builder = builder.suspend() if suspended else builder
    job = builder.obj()
    workers = [make_pod(job, "worker", i).running().obj() for i in range(2)]
    observed = with_access(job, workers, launcher_rbac.role(job, ["pi-worker-0", "pi-worker-1"]))
    observed.config_map, observed.service = observe(job, workers).config_map, observe(job, workers).service
    if legacy:
        observed.legacy_role = legacy_role(job, ["pi-worker-0", "pi-worker-1"])
    plan = exec_pass(builder, observed)
    deleted = {p["metadata"]["name"] for p in plan.pods_to_delete}
    assert bool(deleted) is bool(roles)
    assert {u["metadata"]["name"]: launcher_rbac.granted(u) for u in role_updates(plan)} == roles
    for granted in roles.values():
        assert not deleted & set(granted)


@pytest.mark.parametrize(("kind", "name"), [
    ("Role", ACCESS), ("ServiceAccount", ACCESS), ("RoleBinding", ACCESS), ("ConfigMap", "pi-config"),
    ("Service", "pi"),
])
def test_a_taken_supporting_name_is_retried_on_its_backoff_never_in_a_busy_loop(kind: str, name: str) -> None:
    """The pass plans its workers and the access again, but a taken name holds them back (controller.reconciler):
    waking at once would only be refused again, some hundred times a second."""
    builder = make_mpijob("pi").workers(2)
    job = builder.obj()
    observed = observe(job, owned_objects=False)
    observed.refused = [Refusal(kind, name, 409, "AlreadyExists", f"{name} already exists")]
    plan = exec_pass(builder, observed)
    assert "Pod/pi-worker-0" in kinds(plan)
    assert plan.requeue_after is not None and plan.requeue_after >= 1
