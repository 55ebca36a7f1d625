"""mpiop.policies.launcher_accounts: no template may name an account ending in `-launcher`, not even an SSH job its
own `<job>-launcher`, so no pod runs as an exec launcher's account (whose Role lets it exec into that job's pods)."""

from __future__ import annotations

import pytest

from mpiop import names
from mpiop.api.v2beta1 import ReplicaType
from mpiop.decide import decide
from mpiop.desired.launch import LaunchMode
from mpiop.desired.settings import Settings
from mpiop.plan import Plan
from mpiop.policies import launcher_accounts
from mpiop.policies.outcome import CONTINUE, STOP
from testkit.mpijobs import at, make_mpijob
from testkit.pods import observe


def reserved(account: str) -> str:
    return (f"{account!r} ends in '-launcher': accounts so named are reserved for mpiop's exec launchers (MPIJob "
            f"<job>'s is <job>-<uid digits>-launcher, before <job>-launcher), which may exec into their job's pods: "
            f"name another account")


OTHERS = reserved("train-launcher")


@pytest.mark.parametrize(("replica", "field", "account", "mode", "refused"), [
    ("Launcher", "serviceAccountName", "train-launcher", "ssh", True),
    ("Worker", "serviceAccountName", "train-launcher", "ssh", True),
    ("Worker", "serviceAccountName", "train-launcher", "exec", True),
    ("Worker", "serviceAccount", "train-launcher", "ssh", True),
    ("Launcher", "serviceAccount", "train-launcher", "ssh", True),
    ("Worker", "serviceAccountName", "t-launcher", "exec", True),
    ("Worker", "serviceAccountName", "t-launcher", "ssh", True),
    ("Launcher", "serviceAccountName", "t-launcher", "ssh", True),
    ("Launcher", "serviceAccountName", "t-uidt-launcher", "ssh", True),
    ("Worker", "serviceAccountName", "train-3f2a9c1e-launcher", "ssh", True),
    ("Worker", "serviceAccountName", "trainer", "ssh", False),
    ("Worker", "serviceAccountName", "launcher", "exec", False),
    ("Worker", "serviceAccountName", "train-launcher-1", "ssh", False),
], ids=["ssh-launcher-others", "ssh-worker-others", "exec-worker-others", "deprecated-field-worker",
        "deprecated-field-launcher", "exec-worker-own-legacy", "ssh-worker-own-legacy", "ssh-launcher-own-legacy",
        "ssh-launcher-own", "uid-named-others", "unrelated", "bare-launcher", "not-an-account-name"])
def test_a_template_naming_a_launcher_account_is_refused_naming_the_field(
        replica: ReplicaType, field: str, account: str, mode: LaunchMode, refused: bool) -> None:
    job = make_mpijob("t", "ml").annotation(names.LAUNCH_ANNOTATION, mode).pod_spec(replica, **{field: account}).obj()
    expected = f"spec.mpiReplicaSpecs.{replica}.template.spec.{field}: {reserved(account)}" if refused else None
    assert launcher_accounts.error(job) == expected
    plan = Plan(status=job.status.model_copy(deep=True))
    assert launcher_accounts.apply(plan, job, at(1)) is (STOP if refused else CONTINUE)
    failed = plan.status.condition("Failed")
    assert (failed is not None and failed.reason == "ValidationError") is refused


def test_the_job_fails_before_any_object_with_a_warning_event() -> None:
    job = make_mpijob("t", "ml").workers(2).pod_spec("Launcher", serviceAccountName="train-launcher").obj()
    plan = decide(job, observe(job, owned_objects=False), at(3), Settings())
    failed = plan.status.condition("Failed")
    assert failed is not None and (failed.status, failed.reason) == ("True", "ValidationError")
    assert failed.message == (f"MPIJob ml/t has failed: spec.mpiReplicaSpecs.Launcher.template.spec."
                              f"serviceAccountName: {OTHERS}")
    assert plan.objects_to_create == [] and not plan.create_ssh_secret
    assert [(e.type, e.reason, e.message) for e in plan.events if e.type == "Warning"] == [
        ("Warning", "ValidationError", failed.message)]


def test_an_exec_launcher_naming_any_account_is_still_refused() -> None:
    """launch_mode refuses every account of an exec launcher's template, another job's launcher account too."""
    job = make_mpijob("t", "ml").pod_spec("Launcher", serviceAccountName="train-launcher").obj()
    failed = decide(job, observe(job, owned_objects=False), at(3), Settings(default_launch="exec")).status.condition(
        "Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert "spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName: 'train-launcher'" in (failed.message or "")


def test_every_launcher_account_mpiop_makes_has_the_reserved_suffix() -> None:
    for name in ("t", "train", "x-launcher"):
        job = make_mpijob(name).obj()
        assert names.launcher_account_name(job).endswith(launcher_accounts.SUFFIX)
        assert names.legacy_launcher_account_name(job).endswith(launcher_accounts.SUFFIX)
