"""helm, for the tests that render the chart (deploy/helm/mpiop) and for `hack/helm.sh`: built once from its Go
module into ``.cache/helm/<version>/bin`` on the project's Kubernetes modules (devcluster/pinned.py).

``python -m devcluster.helm`` prints its path (`make test-binaries` runs it through hack/helm.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

from devcluster import binaries, pinned
from devcluster.versions import HELM_VERSION

HELM_MODULE = "helm.sh/helm/v3"


def helm_binary(version: str = HELM_VERSION) -> Path:
    """The helm of the pinned release, built once."""
    bin_dir = pinned.build_pinned(binaries.cache_dir() / "helm" / version, {"helm": f"{HELM_MODULE}/cmd/helm"},
                                  require=f"{HELM_MODULE} {version}", what=f"helm {version}",
                                  ldflags=f"-s -w -X {HELM_MODULE}/internal/version.version={version}",
                                  unpinned=["github.com/spf13/pflag"])  # it calls pflag's newer ParseErrorsAllowlist
    return bin_dir / "helm"


if __name__ == "__main__":
    try:
        print(helm_binary())
    except binaries.BinaryError as error:  # one line naming what is missing and what makes it, no traceback
        sys.exit(f"helm: {error}")
