"""The product ships alone: the wheel (what deploy/Dockerfile and the e2e operator image install) holds the
mpiop package and nothing of the dev/test infrastructure, and the CLI offers no dev command."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_mpiop_only(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("mpiop-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mpiop/decide.py" in names
    assert [n for n in names if not n.startswith(("mpiop/", "mpiop-"))] == []
    assert [n for n in names if "devcluster" in n or n.startswith("mpiop/api/install")] == []


def test_the_cli_has_no_dev_command() -> None:
    shown = subprocess.run([sys.executable, "-m", "mpiop", "--help"], check=True, capture_output=True, text=True,
                           timeout=60).stdout
    assert "run" in shown and "crd" in shown
    assert "dev-cluster" not in shown
