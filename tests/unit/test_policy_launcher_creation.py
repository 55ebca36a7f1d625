"""mpiop.policies.launcher_creation: AtStartup creates the launcher with the workers, WaitForWorkersReady
once every worker of the current attempt is Ready; under exec launch either waits for the Role to name every
worker, and for its ServiceAccount, Role and RoleBinding to be the job's own."""

from __future__ import annotations

import pytest

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LauncherCreationPolicy
from mpiop.desired import launcher_rbac
from mpiop.policies import launcher_creation
from testkit.mpijobs import make_mpijob
from testkit.pods import make_pod, observe


def test_at_startup_allows_the_launcher_before_any_worker_exists() -> None:
    job = make_mpijob("pi").workers(2).launcher_creation_policy("AtStartup").obj()
    assert launcher_creation.launcher_may_start(job, observe(job), attempt=0) is True


@pytest.mark.parametrize(
    ("workers", "launcher_made"),
    [
        ([], False),
        (["pending", "pending"], False),
        (["running", "running"], False),
        (["ready", "running"], False),
        (["ready"], False),
        (["ready", "ready-terminating"], False),
        (["ready", "ready"], True),
        (["ready", None, "ready"], False),
    ],
    ids=["no-workers", "pending", "running-not-ready", "one-ready", "one-missing", "one-terminating", "all-ready",
         "gap-filled-by-extra-worker"],
)
def test_wait_for_workers_ready_holds_the_launcher(workers: list[str | None], launcher_made: bool) -> None:
    job = make_mpijob("pi").workers(2).wait_for_workers_ready().obj()
    pods = []
    for index, state in enumerate(workers):
        if state is None:
            continue
        pod = make_pod(job, "worker", index)
        if state.startswith("running"):
            pod.running()
        if state.startswith("ready"):
            pod.ready()
        if state.endswith("terminating"):
            pod.terminating()
        pods.append(pod.obj())
    assert launcher_creation.launcher_may_start(job, observe(job, pods), attempt=0) is launcher_made


def test_ready_workers_of_an_old_attempt_do_not_count() -> None:
    job = make_mpijob("pi").workers(1).wait_for_workers_ready().status(restart_count=1).obj()
    pods = [make_pod(job, "worker", 0, attempt=0).ready().obj()]
    assert launcher_creation.launcher_may_start(job, observe(job, pods), attempt=1) is False


@pytest.mark.parametrize(
    ("policy", "named", "ready", "launcher_made"),
    [
        ("AtStartup", None, False, False),
        ("AtStartup", [], False, False),
        ("AtStartup", ["pi-worker-0"], False, False),
        ("AtStartup", ["pi-worker-1", "pi-worker-0"], False, True),
        ("AtStartup", ["pi-launcher", "pi-worker-0", "pi-worker-1"], False, True),
        ("WaitForWorkersReady", ["pi-worker-0", "pi-worker-1"], False, False),
        ("WaitForWorkersReady", ["pi-worker-0", "pi-worker-1"], True, True),
        ("WaitForWorkersReady", None, True, False),
    ],
    ids=["no-role", "role-names-none", "role-names-one", "role-names-every-worker", "and-the-launcher",
         "wait-ready-not-ready", "wait-ready-and-named", "wait-ready-not-named"],
)
def test_an_exec_launcher_waits_until_its_role_names_every_worker(policy: LauncherCreationPolicy,
                                                                  named: list[str] | None, ready: bool,
                                                                  launcher_made: bool) -> None:
    job = make_mpijob("pi").workers(2).launcher_creation_policy(policy).obj()
    pods = [(make_pod(job, "worker", i).ready() if ready else make_pod(job, "worker", i)).obj() for i in range(2)]
    observed = observe(job, pods)
    observed.role = None if named is None else launcher_rbac.role(job, named)
    observed.service_account = launcher_rbac.service_account(job)
    observed.role_binding = launcher_rbac.role_binding(job)
    assert launcher_creation.launcher_may_start(job, observed, 0, exec_launch=True) is launcher_made
    ssh = launcher_creation.launcher_may_start(job, observed, 0, exec_launch=False)
    assert ssh is (policy == "AtStartup" or ready)  # SSH launch has no Role to wait for


def someone_elses(obj: JSON) -> JSON:
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "uid-admin", "controller": True}]}}


@pytest.mark.parametrize(("account", "binding", "role_owned", "launcher_made"), [
    ("own", "own", True, True),
    (None, "own", True, False),
    ("own", None, True, False),
    ("another's", "own", True, False),
    ("own", "another's", True, False),
    ("own", "own", False, False),
], ids=["all-own", "no-account", "no-binding", "anothers-account", "anothers-binding", "anothers-role"])
def test_an_exec_launcher_is_made_only_once_its_account_role_and_binding_are_the_jobs_own(
        account: str | None, binding: str | None, role_owned: bool, launcher_made: bool) -> None:
    job = make_mpijob("pi").workers(2).obj()
    observed = observe(job, [make_pod(job, "worker", i).obj() for i in range(2)])
    role = launcher_rbac.role(job, ["pi-worker-0", "pi-worker-1"])
    observed.role = role if role_owned else someone_elses(role)
    states = {"own": lambda o: o, "another's": someone_elses}
    observed.service_account = None if account is None else states[account](launcher_rbac.service_account(job))
    observed.role_binding = None if binding is None else states[binding](launcher_rbac.role_binding(job))
    assert launcher_creation.launcher_may_start(job, observed, 0, exec_launch=True) is launcher_made
