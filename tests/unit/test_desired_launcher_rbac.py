"""mpiop.desired.launcher_rbac and its place in ensure: an exec launcher may exec into exactly its job's pods."""

from __future__ import annotations

import pytest

from mpiop.desired import ensure, hostnetwork, launcher_rbac
from mpiop.desired.launch import LAUNCH_ANNOTATION
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from testkit.mpijobs import MPIJobBuilder, make_mpijob

EXEC = Settings(default_launch="exec")


def supporting(builder: MPIJobBuilder, observed: Observed | None = None, settings: Settings = EXEC,
               restarts: int = 0) -> Plan:
    job = builder.status(restart_count=restarts).obj() if restarts else builder.obj()
    plan = Plan(status=job.status.model_copy(deep=True))
    ensure.supporting_objects(plan, job, observed or Observed(), hostnetwork.NO_PORTS, settings)
    return plan


def kinds(plan: Plan) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in plan.objects_to_create]


@pytest.mark.parametrize(("builder", "attempt", "targets"), [
    (make_mpijob("pi").workers(3), 0, ["pi-worker-0", "pi-worker-1", "pi-worker-2"]),
    (make_mpijob("pi").workers(2), 4, ["pi-worker-0", "pi-worker-1"]),
    (make_mpijob("pi").workers(1).launcher_as_worker(), 0, ["pi-launcher", "pi-worker-0"]),
    (make_mpijob("pi").workers(1).launcher_as_worker(), 2, ["pi-launcher-2", "pi-worker-0"]),
], ids=["workers", "workers-later-attempt", "launcher-works", "launcher-works-later-attempt"])
def test_the_role_names_exactly_the_pods_mpirun_starts_ranks_in(builder: MPIJobBuilder, attempt: int,
                                                                 targets: list[str]) -> None:
    role = launcher_rbac.role(builder.obj(), attempt)
    assert role["metadata"]["name"] == "pi-launcher"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": targets, "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": targets, "verbs": ["create", "get"]},
    ]


def test_the_binding_gives_the_role_to_the_launcher_account_only() -> None:
    job = make_mpijob("pi", "ml").obj()
    binding = launcher_rbac.role_binding(job)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pi-launcher"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pi-launcher", "namespace": "ml"}]
    for obj in (binding, launcher_rbac.role(job, 0), launcher_rbac.service_account(job)):
        assert obj["metadata"]["ownerReferences"][0]["controller"] is True


@pytest.mark.parametrize(("builder", "settings", "wanted", "ssh_secret"), [
    (make_mpijob("pi"), EXEC, ["ServiceAccount/pi-launcher", "Role/pi-launcher", "RoleBinding/pi-launcher"], False),
    (make_mpijob("pi").annotation(LAUNCH_ANNOTATION, "exec"), Settings(),
     ["ServiceAccount/pi-launcher", "Role/pi-launcher", "RoleBinding/pi-launcher"], False),
    (make_mpijob("pi"), Settings(), [], True),
    (make_mpijob("pi").annotation(LAUNCH_ANNOTATION, "ssh"), EXEC, [], True),
], ids=["default-exec", "annotated-exec", "ssh", "annotated-ssh"])
def test_exec_jobs_get_launcher_access_instead_of_an_ssh_key(builder: MPIJobBuilder, settings: Settings,
                                                             wanted: list[str], ssh_secret: bool) -> None:
    plan = supporting(builder, settings=settings)
    assert [k for k in kinds(plan) if not k.startswith(("Service/", "ConfigMap/"))] == wanted
    assert plan.create_ssh_secret is ssh_secret


def test_a_later_attempt_of_a_working_launcher_renames_it_in_the_role() -> None:
    builder = make_mpijob("pi").workers(1).launcher_as_worker()
    job = builder.obj()
    observed = Observed(service_account=launcher_rbac.service_account(job), role=launcher_rbac.role(job, 0),
                        role_binding=launcher_rbac.role_binding(job))
    assert supporting(builder, observed).objects_to_update == []
    [updated] = supporting(builder, observed, restarts=1).objects_to_update
    assert updated["kind"] == "Role" and updated["rules"][0]["resourceNames"] == ["pi-launcher-1", "pi-worker-0"]
    assert [k for k in kinds(supporting(builder, observed, restarts=1)) if "pi-launcher" in k] == []
