"""mpiop.policies.launcher_accounts: no template may name an account `<job>-launcher` but its own SSH job's, so no
pod runs as another job's exec launcher (whose Role lets it exec into that job's pods)."""

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

OTHERS = ("'train-launcher' is MPIJob 'train''s exec launcher account (whether that job exists now or later), which "
          "may exec into that job's pods; accounts named <job>-launcher are reserved for mpiop's exec launchers: "
          "name another account")
OWN = ("'t-launcher' is this job's exec launcher account, which only its launcher pod runs as; accounts named "
       "<job>-launcher are reserved for mpiop's exec launchers: name another account")


@pytest.mark.parametrize(("replica", "field", "account", "mode", "error"), [
    ("Launcher", "serviceAccountName", "train-launcher", "ssh", OTHERS),
    ("Worker", "serviceAccountName", "train-launcher", "ssh", OTHERS),
    ("Worker", "serviceAccountName", "train-launcher", "exec", OTHERS),
    ("Worker", "serviceAccount", "train-launcher", "ssh", OTHERS),
    ("Launcher", "serviceAccount", "train-launcher", "ssh", OTHERS),
    ("Worker", "serviceAccountName", "t-launcher", "exec", OWN),
    ("Worker", "serviceAccountName", "t-launcher", "ssh", None),
    ("Launcher", "serviceAccountName", "t-launcher", "ssh", None),
    ("Worker", "serviceAccountName", "trainer", "ssh", None),
    ("Worker", "serviceAccountName", "launcher", "exec", None),
    ("Worker", "serviceAccountName", "train-launcher-1", "ssh", None),
], ids=["ssh-launcher-others", "ssh-worker-others", "exec-worker-others", "deprecated-field-worker",
        "deprecated-field-launcher", "exec-worker-own", "ssh-worker-own", "ssh-launcher-own", "unrelated",
        "bare-launcher", "not-an-account-name"])
def test_a_template_naming_a_launcher_account_is_refused_naming_the_field(
        replica: ReplicaType, field: str, account: str, mode: LaunchMode, error: str | None) -> None:
    job = make_mpijob("t", "ml").pod_spec(replica, **{field: account}).obj()
    expected = None if error is None else f"spec.mpiReplicaSpecs.{replica}.template.spec.{field}: {error}"
    assert launcher_accounts.error(job, mode) == expected
    plan = Plan(status=job.status.model_copy(deep=True))
    assert launcher_accounts.apply(plan, job, at(1), mode) is (CONTINUE if error is None else STOP)


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
        assert names.launcher_account_name(make_mpijob(name).obj()).endswith(launcher_accounts.SUFFIX)
