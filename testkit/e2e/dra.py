"""A real DRA driver on the real node: devcluster/draplugin.py (fake devices, prepared by the kubelet through its
kubelet plugin) registered with the node's kubelet, its ResourceSlice of 4 devices `gpu-0..3` in the node's pool and
a DeviceClass of its devices; and the pi job whose workers claim them."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devcluster.controlplane import Component
from devcluster.nodehost import KUBELET_ROOT, NODE_NAME
from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.raw import JSON
from testkit.dra import DEVICE_CLASSES, RESOURCE_SLICES, device_class, node_gpus
from testkit.e2e.kube import PODS, Api, wait_for
from testkit.process import ROOT

DRIVER = "gpu.e2e.mpiop.dev"  # its DeviceClass has the same name (testkit.dra.device_class)
DEVICES = 4


@dataclass
class FakeDriver:
    """The running plugin: its log, and the claims it has prepared (one JSON file per claim uid, until unprepared)."""

    plugin: Component
    claims: Path

    def prepared(self) -> dict[str, JSON]:
        """claim uid -> {namespace, name, devices: [pool/device]} of each claim prepared and not yet unprepared."""
        files = sorted(self.claims.glob("*.json")) if self.claims.is_dir() else []
        return {path.stem: json.loads(path.read_text()) for path in files}

    def log(self) -> str:
        return self.plugin.log_tail(200)


@contextlib.contextmanager
def fake_dra_driver(api: Api, kubeconfig: Path, logs: Path, namespace: str) -> Iterator[FakeDriver]:
    """The plugin registered with the kubelet, then its ResourceSlice (after: the kubelet deletes its node's
    slices when it starts) and DeviceClass; all removed afterwards and the plugin stopped, once `namespace`'s pods
    are gone and the kubelet has had it unprepare their claims (a kubelet left with prepared claims of a driver
    gone retries unpreparing them)."""
    plugin = Component("draplugin", [sys.executable, "-m", "devcluster.draplugin", "--driver", DRIVER,
                                     "--kubeconfig", str(kubeconfig), "--kubelet-root", str(KUBELET_ROOT)],
                       logs / "draplugin.log", cwd=ROOT)
    plugin.start(tie_to_parent=True)
    driver = FakeDriver(plugin, KUBELET_ROOT / "plugins" / DRIVER / "claims")
    try:
        wait_for(lambda: not plugin.running() or "registered with the kubelet" in driver.log(), 60,
                 "the kubelet to register the DRA plugin", describe=driver.log)
        assert plugin.running(), f"the DRA plugin exited:\n{driver.log()}"
        # Then connected: a registered driver the kubelet is not connected to has its slices wiped 30 s later.
        kubelet_log = logs / "kubelet.log"
        wait_for(lambda: any('"Connection changed"' in line and f'driverName="{DRIVER}"' in line
                             and "connected=true" in line for line in kubelet_log.read_text().splitlines()), 60,
                 "the kubelet to connect to the DRA plugin", describe=driver.log)
        api.create(DEVICE_CLASSES.path(), device_class(DRIVER))
        api.create(RESOURCE_SLICES.path(), node_gpus(DRIVER, NODE_NAME, DEVICES))
        yield driver
    finally:
        for pod in api.pods(namespace):
            api.delete(f"{PODS.format(ns=namespace)}/{pod['metadata']['name']}")
        try:
            wait_for(lambda: not driver.prepared(), 120, "the kubelet to have the plugin unprepare every claim",
                     describe=driver.log)
        except AssertionError as err:  # the test's own failure, if any, is the one to report
            print(err, file=sys.stderr)
        api.delete(RESOURCE_SLICES.path(name=f"{NODE_NAME}-{DRIVER}"))
        api.delete(DEVICE_CLASSES.path(name=DRIVER))
        plugin.stop()


def claimed_gpus_pi_job(name: str, image: str, template: str) -> JSON:
    """Open MPI's pi, 2 workers each claiming the devices of ResourceClaimTemplate `template` (claim `gpus`, used by
    the worker container); no slotsPerWorker and mpirun given no -n, so the ranks are the hostfile's slots.
    cleanPodPolicy None: the workers, and so their claims, stay after the job succeeds, to be looked at."""
    command = ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "/usr/local/bin/pi-openmpi", SAMPLES]
    manifest = pi_job(name, image, launcher_command=command, runPolicy={"cleanPodPolicy": "None"},
                      worker_pod_spec={"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}]})
    spec = manifest["spec"]
    del spec["slotsPerWorker"]
    spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return manifest
