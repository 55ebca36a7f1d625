"""The krew manifest of `kubectl mpijob` (deploy/krew/mpijob.yaml) matches the archive `make krew` builds, follows
krew's manifest rules, and the archive's shim runs the installed plugin."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import yaml

from mpiop import __version__

ROOT = Path(__file__).parents[2]


def krew() -> ModuleType:
    spec = importlib.util.spec_from_file_location("krew_tool", ROOT / "hack" / "krew.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_manifest_is_the_built_archives() -> None:
    tool = krew()
    archive = tool.archive()
    assert archive == tool.archive(), "the archive must be reproducible for its sha256 to be checked"
    committed = (ROOT / "deploy" / "krew" / "mpijob.yaml").read_text()
    assert committed == tool.manifest_yaml(hashlib.sha256(archive).hexdigest()), "stale: run `make krew`"


def test_manifest_follows_krews_rules() -> None:
    path = ROOT / "deploy" / "krew" / "mpijob.yaml"
    manifest = yaml.safe_load(path.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == path.stem  # the file is named as the plugin
    spec = manifest["spec"]
    assert spec["version"] == f"v{__version__}"
    assert len(spec["shortDescription"]) <= 50
    with tarfile.open(fileobj=io.BytesIO(krew().archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    for platform in spec["platforms"]:
        assert set(platform["selector"]["matchLabels"]) == {"os", "arch"}
        assert platform["uri"].endswith(f"/{spec['version']}/kubectl-mpijob.tar.gz")
        assert platform["bin"] in members and members[platform["bin"]].mode & 0o111
        assert {f["from"] for f in platform["files"]} <= set(members)


def test_the_shim_runs_the_installed_plugin(tmp_path: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(krew().archive())) as tar:
        tar.extractall(tmp_path, filter="data")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    shown = subprocess.run([str(tmp_path / "kubectl-mpijob"), "attempts", "--help"], env=env, capture_output=True,
                           text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: kubectl mpijob attempts [OPTIONS] NAME")
