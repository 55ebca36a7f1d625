"""mpiop.policies.launch_mode: the launch annotation picks ssh or exec; anything else fails the job, naming it."""

from __future__ import annotations

import pytest

from mpiop.decide import decide
from mpiop.desired import launch
from mpiop.desired.launch import LaunchMode
from mpiop.desired.settings import Settings
from mpiop.names import LAUNCH_ANNOTATION
from mpiop.plan import Plan
from mpiop.policies import launch_mode
from mpiop.policies.outcome import CONTINUE
from testkit.mpijobs import at, make_mpijob
from testkit.pods import observe


@pytest.mark.parametrize(("annotation", "default", "mode"), [
    (None, "ssh", "ssh"),
    (None, "exec", "exec"),
    ("exec", "ssh", "exec"),
    ("ssh", "exec", "ssh"),
], ids=["default-ssh", "default-exec", "annotation-exec-wins", "annotation-ssh-wins"])
def test_the_annotation_wins_over_the_operator_default(annotation: str | None, default: LaunchMode,
                                                       mode: LaunchMode) -> None:
    builder = make_mpijob("t", "ml")
    if annotation is not None:
        builder = builder.annotation(LAUNCH_ANNOTATION, annotation)
    job = builder.obj()
    assert launch.mode(job, default) == mode
    plan = Plan(status=job.status.model_copy(deep=True))
    assert launch_mode.apply(plan, job, at(0)) is CONTINUE
    assert plan.status.condition("Failed") is None


@pytest.mark.parametrize("value", ["EXEC", "kubectl", "", " exec"])
def test_a_value_mpiop_does_not_know_fails_the_job_before_any_object(value: str) -> None:
    job = make_mpijob("t", "ml").annotation(LAUNCH_ANNOTATION, value).obj()
    plan = decide(job, observe(job, owned_objects=False), at(3), Settings(default_launch="exec"))
    failed = plan.status.condition("Failed")
    assert failed is not None
    assert (failed.status, failed.reason) == ("True", "ValidationError")
    assert failed.message == (f"MPIJob ml/t has failed: metadata.annotations[mpiop.kubeflow.org/launch]: "
                              f"{value!r} is not one of 'ssh', 'exec'")
    assert plan.objects_to_create == [] and not plan.create_ssh_secret
    assert ("Warning", "ValidationError") in [(e.type, e.reason) for e in plan.events]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("serviceAccountName", "trainer", "spec.mpiReplicaSpecs.Launcher.template.spec.serviceAccountName: 'trainer' "
     "cannot be used with mpiop.kubeflow.org/launch: exec; the launcher runs as t-launcher, the only account "
     "allowed to exec into this job's pods"),
    ("automountServiceAccountToken", False, "spec.mpiReplicaSpecs.Launcher.template.spec."
     "automountServiceAccountToken: false cannot be used with mpiop.kubeflow.org/launch: exec; the launcher's "
     "token is what starts the ranks"),
])
def test_an_exec_launcher_template_with_its_own_account_is_refused_naming_the_field(field: str, value: object,
                                                                                   message: str) -> None:
    job = make_mpijob("t", "ml").pod_spec("Launcher", **{field: value}).obj()
    plan = decide(job, observe(job, owned_objects=False), at(3), Settings(default_launch="exec"))
    failed = plan.status.condition("Failed")
    assert failed is not None and failed.reason == "ValidationError"
    assert failed.message == f"MPIJob ml/t has failed: {message}"
    ssh_job = decide(job, observe(job, owned_objects=False), at(3), Settings(default_launch="ssh"))
    assert ssh_job.status.condition("Failed") is None  # under SSH the template's account is the user's business
