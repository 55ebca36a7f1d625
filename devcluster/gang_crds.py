"""The PodGroup CRDs of the gang schedulers mpiop can name besides Kubernetes' own: scheduler-plugins' and Volcano's.

* ``scheduler_plugins_crd()``: the PodGroup CRD (``scheduling.x-k8s.io``) shipped in scheduler-plugins' module.
* ``volcano_podgroup_crd()``: Volcano's ``scheduling.volcano.sh`` PodGroup CRD of ``volcano.sh/apis``. That
  module ships Go types (with kubebuilder markers) but no CRD, so controller-gen (controller-tools, pinned to the
  project's Kubernetes modules, devcluster/pinned.py) generates it from them, as Volcano's own release does.

Neither scheduler runs in the suite: Volcano's cannot be built here (the Go module proxy refuses volcano.sh/volcano),
and scheduler-plugins' newest release served (v0.34.7) is for Kubernetes 1.34, end of life, and compiles on none
of 1.35, 1.36 or 1.37's modules; a fourth set of Kubernetes modules compiled for it alone cost a cold CI run
minutes (devcluster/versions.py). Kubernetes' own gang scheduling (1.37's stock kube-scheduler) is what the real
scheduler tests run (test_gang_kubernetes.py, test_node_exclusion_simulated.py); these two modes are checked at
the apiserver: every field mpiop writes kept by the CRD, the RBAC a job's life uses (test_gang.py, test_rbac_gang.py).
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
    SCHEDULER_PLUGINS_VERSION,
    VOLCANO_APIS_VERSION,
)

SCHEDULER_PLUGINS_MODULE = "sigs.k8s.io/scheduler-plugins"
VOLCANO_APIS_MODULE = "volcano.sh/apis"
SCHEDULER_PLUGINS_CRD = "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"
VOLCANO_PODGROUP_CRD = "scheduling.volcano.sh_podgroups.yaml"
# kubeflow's name for a scheduler-plugins deployment; the value of `mpiop run --gang-scheduling`.
DEFAULT_SCHEDULER_NAME = "scheduler-plugins-scheduler"


def _root(version: str = SCHEDULER_PLUGINS_VERSION) -> Path:
    return binaries.cache_dir() / "scheduler-plugins" / version


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def scheduler_plugins_crd(version: str = SCHEDULER_PLUGINS_VERSION) -> dict[str, Any]:
    """The podgroups.scheduling.x-k8s.io CRD exactly as the module ships it."""
    crds = _root(version) / "crds"
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


if __name__ == "__main__":
    print(scheduler_plugins_crd()["metadata"]["name"])
    print(volcano_podgroup_crd()["metadata"]["name"])
