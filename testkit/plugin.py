"""Running `kubectl mpijob` as a user does: the pinned kubectl finds the installed `kubectl-mpijob` on PATH (the
venv's bin, where the package put it) and runs it with the user's kubeconfig. Shared by the integration and e2e
tests of the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devcluster import binaries


def plugin_env(kubeconfig: Path | str) -> dict[str, str]:
    """The environment: PATH with the pinned kubectl's directory and the venv's bin first, KUBECONFIG set."""
    path = os.pathsep.join([str(binaries.kube_binary("kubectl").parent), str(Path(sys.executable).parent),
                            os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "KUBECONFIG": str(kubeconfig)}


def kubectl_mpijob(kubeconfig: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl mpijob ARGS`, its output captured."""
    return subprocess.run(["kubectl", "mpijob", *args], env=plugin_env(kubeconfig), capture_output=True, text=True,
                          check=False)
