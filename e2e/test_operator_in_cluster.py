"""The operator itself in the cluster: deploy/base (its ServiceAccount, least-privilege RBAC, two replicas
with leader election, the GPU layout webhook) on an operator image built the same way as the MPI image, then an
MPIJob that only the in-cluster operator can run (no `mpiop run` process in this test): Open MPI's pi stating only
its total GPUs, laid out by the leader's webhook as it is created."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from devcluster import images, oci
from devcluster.binaries import project_root
from mpiop.names import GPU_LAYOUT_ANNOTATION
from mpiop.policies.gpu_layout import AT_ADMISSION
from testkit.e2e.gpus import fake_gpus, total_gpus_pi_job
from testkit.e2e.kube import MPIJOBS, is_true, wait_for
from testkit.e2e.mpi import assert_pi, assert_succeeded
from testkit.e2e.session import E2E

# Node-wide: cluster-scoped RBAC, a MutatingWebhookConfiguration for every MPIJob, fake GPUs in the node's status,
# and an operator that is no test's `mpiop run`: alone on the node (e2e/conftest.py).
pytestmark = pytest.mark.node_wide

NAMESPACE = "mpiop-system"


def _overlay(directory: Path, image: oci.Image) -> Path:
    """deploy/base with the locally built image (never pulled): the only change to what users apply."""
    root = project_root()
    assert root is not None
    directory.mkdir(parents=True, exist_ok=True)
    name, tag = image.ref.rsplit(":", 1)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(root / "deploy" / "base", directory)],
        "images": [{"name": "ghcr.io/mpiop/mpiop", "newName": name, "newTag": tag}],
        "patches": [{
            "target": {"kind": "Deployment", "name": "mpiop"},
            "patch": yaml.safe_dump([{"op": "add", "path": "/spec/template/spec/containers/0/imagePullPolicy",
                                      "value": "Never"}]),
        }],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def test_operator_in_cluster(bare: E2E) -> None:
    node = bare.node
    image = images.operator_image()
    node.import_images([image])
    assert node.workdir is not None
    overlay = _overlay(node.workdir / "overlay", image)
    started = time.monotonic()
    node.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    try:
        deployment = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/mpiop"

        def describe() -> str:
            lines = []
            for pod in bare.api.pods(NAMESPACE):
                name = pod["metadata"]["name"]
                lines.append(f"pod {name} {pod['status'].get('phase')} {pod['status'].get('containerStatuses')}")
                try:
                    lines.append(bare.api.logs(NAMESPACE, name)[-1500:])
                except Exception as err:  # not started
                    lines.append(str(err))
            return "\n".join(lines)

        wait_for(lambda: (bare.api.get(deployment).get("status") or {}).get("readyReplicas", 0) >= 2, 180,
                 "both operator replicas Ready", describe=describe)
        bare.record("operator-in-cluster: apply to 2 replicas Ready", time.monotonic() - started)
        pods = bare.api.pods(NAMESPACE, "app.kubernetes.io/name=mpiop")
        assert {p["spec"]["serviceAccountName"] for p in pods} == {"mpiop"}
        assert all(p["spec"]["containers"][0]["image"] == image.ref for p in pods)
        lease = wait_for(lambda: bare.api.get_or_none(
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/mpiop"), 60, "the leader Lease")
        assert lease["spec"]["holderIdentity"].split("_")[0] in {p["metadata"]["name"] for p in pods}, lease

        with fake_gpus(bare.api, 4):
            # The leader serves the GPU layout webhook behind Service mpiop-status (the apiserver reaches it through
            # kube-proxy) once it has written its CA into the webhook's configuration: a dry run shows when.
            manifest = total_gpus_pi_job("pi-in-cluster", bare.image, 4)
            dry_run = f"{MPIJOBS.format(ns=bare.ns)}?dryRun=All"
            wait_for(lambda: GPU_LAYOUT_ANNOTATION in (bare.api.create(dry_run, manifest)
                                                       ["metadata"].get("annotations") or {}), 120,
                     "the GPU layout webhook answering through Service mpiop-status", describe=describe)
            job_started = time.monotonic()
            created = bare.api.create(MPIJOBS.format(ns=bare.ns), manifest)
            record = created["metadata"]["annotations"][GPU_LAYOUT_ANNOTATION]
            bare.report("in_cluster_gpu_layout", record)
            assert record == ("4 nvidia.com/gpu as 1 worker x 4 GPUs (slotsPerWorker 4), on nodes: 1 node with 4 "
                              "nvidia.com/gpu" + AT_ADMISSION)
            job = bare.wait_finished("pi-in-cluster", timeout=240)
            bare.record("operator-in-cluster: openmpi-pi of 4 GPUs laid out at admission",
                        time.monotonic() - job_started)
        assert_succeeded(job)
        assert is_true(job, "Created")
        assert_pi(bare.launcher_log("pi-in-cluster"), "pi-in-cluster", ranks=4, hosts=1)
    finally:
        # Not the CRD (other tests' jobs): the operator's namespace and its cluster-scoped RBAC.
        node.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s",
                     check=False)
        node.kubectl("delete", "clusterrolebinding,clusterrole", "mpiop", "--ignore-not-found", check=False)
        node.kubectl("delete", "mutatingwebhookconfiguration", "mpiop-gpu-layout", "--ignore-not-found", check=False)
