"""Exec launch's bad input on the real node: each ends in a condition and an Event on the MPIJob that say what is
wrong, never a launcher that waits forever. A `--kubectl-image` that cannot be pulled (a reference to no
registry), and a worker image without /bin/sh (exec launch starts every remote command with it), with the
worker's own command and with mpiop's default one."""

from __future__ import annotations

import pytest

from mpiop.api.raw import JSON
from mpiop.policies.kubectl_image import REASON as KUBECTL_IMAGE_UNAVAILABLE
from testkit.e2e.exec_launch import describe, exec_pi_job, finished, report, restrict_namespace
from testkit.e2e.kube import condition, is_true, wait_for
from testkit.e2e.session import E2E, operator_process

MISSING_KUBECTL = "mpiop.local/no-such-kubectl:0"
PI = "exec mpirun.openmpi -n 4 /usr/local/bin/pi-openmpi 2000000"


def test_an_unpullable_kubectl_image_is_named_on_the_job(bare: E2E, exec_images_imported: tuple[str, str]) -> None:
    """The launcher's init container cannot pull kubectl: Running=False KubectlImageUnavailable naming the image
    and the flag, and one Warning Event, while the job waits (it fails after policies.kubectl_image's grace)."""
    restrict_namespace(bare)
    with operator_process(bare, "--kubectl-image", MISSING_KUBECTL):
        bare.create_job(exec_pi_job("nokubectl", exec_images_imported[0], PI))

        def waiting() -> JSON | None:
            found = condition(bare.job("nokubectl"), "Running")
            return found if found and found.get("reason") == KUBECTL_IMAGE_UNAVAILABLE else None

        running = wait_for(waiting, 180, "the KubectlImageUnavailable condition",
                           describe=lambda: describe(bare, "nokubectl"))
        event = wait_for(lambda: next((e for e in bare.api.events(bare.ns)
                                       if e.get("reason") == KUBECTL_IMAGE_UNAVAILABLE), None), 30, "its Event")
        report(bare, "nokubectl")
        job = bare.job("nokubectl")
    print(f"Running=False {running['reason']}: {running['message']}")
    assert MISSING_KUBECTL in running["message"] and "--kubectl-image" in running["message"], running
    assert (event["type"], event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
        "Warning", "MPIJob", "nokubectl"), event
    assert not is_true(job, "Failed")


@pytest.mark.parametrize("own_command", [True, False], ids=["own-worker-command", "default-worker-command"])
def test_a_worker_image_without_a_shell_fails_the_job_saying_so(restricted: E2E, exec_images_imported: tuple[str, str],
                                                                 noshell_image: str, own_command: bool) -> None:
    """With a command of its own the worker runs, and kubexec.sh cannot start mpirun's daemon in it: its line names
    the pod and /bin/sh. With mpiop's default (a /bin/sh loop) the worker cannot start: the runtime's words name
    /bin/sh. Either way the job Fails (backoffLimit 0) with the reason in its condition."""
    e2e = restricted
    manifest = exec_pi_job("noshell", exec_images_imported[0], PI, runPolicy={"backoffLimit": 0})
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["image"] = noshell_image
    if own_command:
        worker["containers"][0]["command"] = ["sleep", "infinity"]
        worker["terminationGracePeriodSeconds"] = 1  # sleep as PID 1 ignores SIGTERM
    e2e.create_job(manifest)
    job = finished(e2e, "noshell", timeout=300)
    report(e2e, "noshell")
    failed = condition(job, "Failed") or {}
    print(f"Failed {failed.get('reason')}: {failed.get('message')}")
    assert is_true(job, "Failed"), describe(e2e, "noshell")
    message = failed.get("message", "")
    if own_command:
        assert "kubexec.sh: pod noshell-worker-" in message and "cannot run /bin/sh" in message, message
    else:
        assert '"/bin/sh"' in message and "noshell-worker-" in message, message
