"""`python -m devcluster up|status|down` as a human runs it: the printed KUBECONFIG works, down leaves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devcluster.binaries import etcd_binary, kube_bin_dir, kube_binary
from devcluster.versions import KUBERNETES_VERSION


def _dev(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devcluster", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_up_prints_a_working_kubeconfig_and_down_stops_every_process(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # Reuse the already built binaries through the envtest convention; keep the state dir private.
    assets = tmp_path / "assets"
    assets.mkdir()
    for built in [*kube_bin_dir().iterdir(), etcd_binary()]:
        (assets / built.name).symlink_to(built)
    env = {**os.environ, "MPIOP_CACHE_DIR": str(cache), "KUBEBUILDER_ASSETS": str(assets)}
    up = _dev(env, "up")
    try:
        assert up.returncode == 0, up.stderr
        last = up.stdout.strip().splitlines()[-1]
        assert last.startswith("export KUBECONFIG=")
        kubeconfig = last.split("=", 1)[1]
        version = subprocess.run([str(kube_binary("kubectl")), f"--kubeconfig={kubeconfig}", "get", "--raw",
                                  "/version"], capture_output=True, text=True, check=True, timeout=60)
        assert json.loads(version.stdout)["gitVersion"] == KUBERNETES_VERSION
        status = _dev(env, "status")
        assert status.returncode == 0 and "kube-scheduler" in status.stdout
        state = json.loads((cache / "dev-cluster" / "state.json").read_text())
        pids = [state["supervisor"], *state["pids"]]
        assert all(_alive(p) for p in pids)
    finally:
        down = _dev(env, "down")
    assert down.returncode == 0 and "no process left" in down.stdout
    assert not any(_alive(p) for p in pids)
    assert _dev(env, "status").returncode == 1
