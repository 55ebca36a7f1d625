"""Gang schedulers for the simulated cluster: scheduler-plugins' Coscheduling, and Volcano's PodGroup API.

* ``coscheduler_binary()``: scheduler-plugins' ``kube-scheduler`` (``cmd/scheduler``, Coscheduling compiled in),
  built once into ``.cache/scheduler-plugins/<version>/bin`` in a wrapper module that pins every module to the
  versions of the Kubernetes its release is for (devcluster/versions.py: no release is on v1.37's modules,
  whose scheduler framework it does not compile against; devcluster/pinned.py).
* ``scheduler_plugins_crd()``: the PodGroup CRD (``scheduling.x-k8s.io``) shipped in that module.
* ``volcano_podgroup_crd()``: Volcano's ``scheduling.volcano.sh`` PodGroup CRD of ``volcano.sh/apis``. That
  module ships Go types (with kubebuilder markers) but no CRD, so controller-gen (controller-tools, pinned the
  same way) generates it from them, as Volcano's own release does.
* ``coscheduler_config()``: a KubeSchedulerConfiguration with one profile, Coscheduling enabled, as
  scheduler-plugins' ``manifests/coscheduling/scheduler-config.yaml`` has it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from devcluster import binaries, pinned
from devcluster.versions import (
    CONTROLLER_TOOLS_VERSION,
    SCHEDULER_PLUGINS_KUBERNETES_VERSION,
    SCHEDULER_PLUGINS_VERSION,
    VOLCANO_APIS_VERSION,
)

SCHEDULER_PLUGINS_MODULE = "sigs.k8s.io/scheduler-plugins"
SCHEDULER_COMMAND = "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
VOLCANO_APIS_MODULE = "volcano.sh/apis"
SCHEDULER_PLUGINS_CRD = "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"
VOLCANO_PODGROUP_CRD = "scheduling.volcano.sh_podgroups.yaml"
# kubeflow's name for a scheduler-plugins deployment; the value of `mpiop run --gang-scheduling`.
DEFAULT_SCHEDULER_NAME = "scheduler-plugins-scheduler"


def _root(version: str = SCHEDULER_PLUGINS_VERSION) -> Path:
    return binaries.cache_dir() / "scheduler-plugins" / version


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def build_coscheduler(version: str = SCHEDULER_PLUGINS_VERSION) -> Path:
    """scheduler-plugins' kube-scheduler (Coscheduling compiled in), built once into the cache on the very
    Kubernetes (and every other module) the project's own binaries are built from."""
    # The version it reports is the Kubernetes it is built on: a v0.x would fail the emulation-version check.
    bin_dir = pinned.build_pinned(_root(version), {"kube-scheduler": SCHEDULER_COMMAND},
                                  require=f"{SCHEDULER_PLUGINS_MODULE} {version}",
                                  what=f"scheduler-plugins {version}",
                                  ldflags=binaries.version_ldflags(SCHEDULER_PLUGINS_KUBERNETES_VERSION),
                                  kubernetes_version=SCHEDULER_PLUGINS_KUBERNETES_VERSION)
    return bin_dir / "kube-scheduler"


def coscheduler_binary(version: str = SCHEDULER_PLUGINS_VERSION) -> Path:
    return build_coscheduler(version)


def scheduler_plugins_crd(version: str = SCHEDULER_PLUGINS_VERSION) -> dict[str, Any]:
    """The podgroups.scheduling.x-k8s.io CRD exactly as the module ships it."""
    crds = _root(version) / "crds"  # its own lock: not held up by a build of the scheduler
    copy = crds / Path(SCHEDULER_PLUGINS_CRD).name
    with binaries.build_lock(crds):
        if not copy.is_file():
            source = binaries.go_mod_download(SCHEDULER_PLUGINS_MODULE, version, crds, "Dir")
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / SCHEDULER_PLUGINS_CRD, copy)
    loaded: dict[str, Any] = yaml.safe_load(copy.read_text())
    return loaded


def controller_gen_binary(version: str = CONTROLLER_TOOLS_VERSION) -> Path:
    root = binaries.cache_dir() / "controller-tools" / version
    command = "sigs.k8s.io/controller-tools/cmd/controller-gen"
    return pinned.build_pinned(root, {"controller-gen": command}, require=f"sigs.k8s.io/controller-tools {version}",
                               what=f"controller-gen {version}", ldflags="-s -w") / "controller-gen"


def volcano_podgroup_crd(version: str = VOLCANO_APIS_VERSION) -> dict[str, Any]:
    """podgroups.scheduling.volcano.sh, generated once by controller-gen from volcano.sh/apis' v1beta1 types."""
    root = binaries.cache_dir() / "volcano-apis" / version
    crd = root / "crds" / VOLCANO_PODGROUP_CRD
    with binaries.build_lock(root):
        if not crd.is_file():
            controller_gen = controller_gen_binary()
            source = binaries.go_mod_download(VOLCANO_APIS_MODULE, version, root, "Dir")
            partial = root / "crds.partial"
            shutil.rmtree(partial, ignore_errors=True)
            binaries.report(f"generating Volcano's PodGroup CRD from {VOLCANO_APIS_MODULE}@{version} (first time only)")
            result = subprocess.run(
                [str(controller_gen), "crd:crdVersions=v1", "paths=./pkg/apis/scheduling/v1beta1",
                 f"output:crd:dir={partial}"], cwd=source, env=_go_env(), check=False)
            if result.returncode != 0 or not (partial / VOLCANO_PODGROUP_CRD).is_file():
                raise binaries.BinaryError(f"controller-gen could not generate {VOLCANO_PODGROUP_CRD} "
                                           f"(exit {result.returncode})")
            crd.parent.mkdir(parents=True, exist_ok=True)
            (partial / VOLCANO_PODGROUP_CRD).replace(crd)
            shutil.rmtree(partial, ignore_errors=True)
    loaded: dict[str, Any] = yaml.safe_load(crd.read_text())
    return loaded


def coscheduler_config(kubeconfig: Path, scheduler_name: str = DEFAULT_SCHEDULER_NAME, *,
                       permit_waiting_seconds: int = 10, qps: float = 1000.0, burst: int = 2000) -> dict[str, Any]:
    """One profile named `scheduler_name`: Coscheduling at every extension point and as the queue sort."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "profiles": [{
            "schedulerName": scheduler_name,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": permit_waiting_seconds}}],
        }],
    }


if __name__ == "__main__":
    print(coscheduler_binary())
    print(scheduler_plugins_crd()["metadata"]["name"])
    print(volcano_podgroup_crd()["metadata"]["name"])
