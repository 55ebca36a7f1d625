"""Jobs under exec launch in the shape OpenShift's restricted SCC gives them: the launch annotation, no sshd
(workers wait: mpiop's default command), an arbitrary UID that is in no image's /etc/passwd, read-only root
filesystems, no privilege escalation, all capabilities dropped, in a namespace enforcing the restricted Pod
Security Standard."""

from __future__ import annotations

from typing import Any

from devcluster import exec_images, images, oci
from devcluster.pi_job import pi_job
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIImplementation
from mpiop.names import LAUNCH_ANNOTATION
from testkit.e2e.kube import ApiError, is_true, wait_for
from testkit.e2e.session import E2E

UID = 1000870000
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                      "readOnlyRootFilesystem": True}
POD_SECURITY = {"runAsUser": UID, "runAsGroup": UID, "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"}}
# Open MPI's rsh/ssh launcher gives up on a UID with no passwd entry ("unknown-user", help-plm-rsh.txt), as
# OpenShift's arbitrary UIDs are: the job mounts one (what nss_wrapper does in images made for OpenShift).
PASSWD = f"root:x:0:0:root:/root:/bin/sh\nmpi:x:{UID}:{UID}:mpi:/tmp:/bin/sh\n"


_imported: set[str] = set()  # derived images (exec launch's) this process had imported: no second look at the node


def import_once(session: E2E, image: oci.Image) -> str:
    """`image` (built and cached on first use) imported into the session's node once; its ref. Another process
    sharing the node (an xdist worker) may import it too: Node.import_images takes the node's lock and imports only
    what containerd does not hold."""
    if image.ref not in _imported:
        session.node.import_images([image])
        _imported.add(image.ref)
    return image.ref


def import_exec_images(session: E2E, suite: str) -> tuple[str, str]:
    """(`suite`'s MPI image without OpenSSH, the kubectl image for `--kubectl-image`), imported once."""
    return (import_once(session, exec_images.mpi_nossh_image(images.MPI_SUITES[suite])),
            import_once(session, exec_images.kubectl_image()))


def restrict_namespace(e2e: E2E) -> None:
    """Enforce the restricted standard in the test's namespace and give it the passwd ConfigMap."""
    e2e.api.merge_patch(f"/api/v1/namespaces/{e2e.ns}", {"metadata": {"labels": RESTRICTED}})
    add_passwd(e2e)


def add_passwd(e2e: E2E) -> None:
    """The passwd ConfigMap restricted_exec's pods mount."""
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "passwd"}, "data": {"passwd": PASSWD}})


def restricted_exec(manifest: JSON) -> JSON:
    """`manifest` (an MPIJob) under exec launch as an arbitrary UID: its workers' own command dropped (they
    wait), read-only root filesystems with a writable /tmp (Open MPI's session directory), the passwd entry."""
    manifest["metadata"].setdefault("annotations", {})[LAUNCH_ANNOTATION] = "exec"
    for role in (LAUNCHER, WORKER):
        pod_spec: dict[str, Any] = manifest["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        main = pod_spec["containers"][0]
        if role == WORKER:
            main.pop("command", None)
        main["securityContext"] = dict(CONTAINER_SECURITY)
        main.setdefault("volumeMounts", []).extend([
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "passwd", "mountPath": "/etc/passwd", "subPath": "passwd"}])
        pod_spec.setdefault("volumes", []).extend([
            {"name": "tmp", "emptyDir": {}}, {"name": "passwd", "configMap": {"name": "passwd"}}])
        pod_spec["securityContext"] = dict(POD_SECURITY)
    return manifest


def exec_pi_job(name: str, image: str, launcher_script: str, implementation: MPIImplementation = "OpenMPI",
                **spec: Any) -> JSON:
    """pi under exec launch in the restricted shape (testkit.e2e.exec_launch), the launcher running a script."""
    spec.setdefault("runPolicy", {"backoffLimit": 1})
    return restricted_exec(pi_job(name, image, implementation=implementation,
                                  launcher_command=["sh", "-c", launcher_script], **spec))


def finished(e2e: E2E, name: str, timeout: float = 240) -> JSON:
    """wait_finished, whose timeout also shows the current launcher's log."""
    def done() -> JSON | None:
        job = e2e.job(name)
        return job if is_true(job, "Succeeded") or is_true(job, "Failed") else None

    result: JSON = wait_for(done, timeout, f"MPIJob {e2e.ns}/{name} to finish", describe=lambda: describe(e2e, name))
    return result


def describe(e2e: E2E, name: str) -> str:
    """The job, its pods and the current launcher's log."""
    try:
        return e2e.describe(name) + "\n  launcher log:\n" + e2e.launcher_log(name)
    except ApiError as err:
        return e2e.describe(name) + f"\n  launcher log: {err}"


def report(e2e: E2E, name: str) -> None:
    """What the test output shows of an exec job: conditions, pods (init containers too), Warning Events."""
    print(e2e.describe(name))
    for pod in e2e.api.pods(e2e.ns):
        for status in (pod["status"].get("initContainerStatuses") or []):
            print(f"  pod {pod['metadata']['name']} init {status['name']}: {status.get('state')}")
    for event in e2e.api.events(e2e.ns):
        if event.get("type") == "Warning":
            print(f"  event {event['involvedObject']['name']}: {event.get('reason')}: {event.get('message')}")
