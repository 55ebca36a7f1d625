"""KWOK (Kubernetes WithOut Kubelet) for the simulated cluster (devcluster/simulated.py): its binary, built once
from its Go module into ``.cache/kwok/<version>/bin`` (on the project's Kubernetes modules, devcluster/pinned.py),
and its default Stages, copied from that module.

``python -m devcluster.kwok`` makes both (`make test-binaries` runs it, so no test builds KWOK under its timeout);
a no-op once they are there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from devcluster import binaries, pinned
from devcluster.versions import KWOK_VERSION

KWOK_MODULE = "sigs.k8s.io/kwok"
# Modules KWOK keeps at its own versions: v0.8.0 calls APIs of them that Kubernetes v1.34's versions lack.
KWOK_OWN_MODULES = ("k8s.io/cri-api", "k8s.io/cri-client", "github.com/spf13/pflag")
# KWOK's own default Stages of the pinned release (node-initialize, node heartbeat with a Lease, pod-ready,
# pod-complete, pod-delete), copied from its module next to the binary: the simulated cluster loads them.
KWOK_DEFAULT_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


def kwok_dir(version: str = KWOK_VERSION) -> Path:
    return binaries.cache_dir() / "kwok" / version


def build_kwok(version: str = KWOK_VERSION) -> Path:
    """Build sigs.k8s.io/kwok/cmd/kwok from its Go module into the cache, on the project's Kubernetes modules but
    the CRI client and pflag (its code needs their newer APIs); return the binary."""
    bin_dir = pinned.build_pinned(kwok_dir(version), {"kwok": f"{KWOK_MODULE}/cmd/kwok"},
                                  require=f"{KWOK_MODULE} {version}", what=f"kwok {version}",
                                  ldflags=f"-s -w -X {KWOK_MODULE}/pkg/consts.Version={version}",
                                  unpinned=KWOK_OWN_MODULES)
    return bin_dir / "kwok"


def kwok_stages_dir(version: str = KWOK_VERSION) -> Path:
    """KWOK's default Stage files of that release, copied once from its Go module into the cache."""
    root = kwok_dir(version)
    stages = root / "stages"
    with binaries.build_lock(root):
        if all((stages / Path(s).name).is_file() for s in KWOK_DEFAULT_STAGES):
            return stages
        source = binaries.go_mod_download(KWOK_MODULE, version, root, "Dir")
        stages.mkdir(parents=True, exist_ok=True)
        for stage in KWOK_DEFAULT_STAGES:
            shutil.copyfile(source / stage, stages / Path(stage).name)
        return stages


def kwok_binary(version: str = KWOK_VERSION) -> Path:
    """The kwok binary of the pinned release: KUBEBUILDER_ASSETS, PATH (if it reports that version), or built."""
    return binaries.from_assets_or_path("kwok", version) or build_kwok(version)


if __name__ == "__main__":
    print(kwok_binary())
    print(kwok_stages_dir())
