"""Intel MPI's runtime for the e2e MPI image, from PyPI's `impi-rt` wheel (Intel's own packaging).

2021.13.1 is the last wheel that carries its libfabric (tcp, shm, verbs... providers) inside and depends on
nothing; later ones need a `libfabric` distribution that PyPI does not have. The wheel is downloaded once
with pip (hash-checked) into `.cache/e2e/wheels/`, and its `*.data/data/` tree (bin/, lib/, etc/) is
extracted, file modes kept, to become `/opt/intel/mpi` in the image.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from devcluster.binaries import build_lock, cache_dir

VERSION = "2021.13.1"
WHEEL = f"impi_rt-{VERSION}-py2.py3-none-manylinux1_x86_64.whl"
SHA256 = "5404adc6af35a651067e69ae2a65db05366a0fbfff14a3415d311b1d3566d177"
# What the image's cache key takes from here: a different wheel is a different image.
KEY = f"impi-rt=={VERSION} sha256:{SHA256}".encode()


class IntelMPIError(RuntimeError):
    """The wheel could not be downloaded or is not what was pinned."""


def wheel() -> Path:
    """The pinned wheel, downloaded (pip, --require-hashes) on first use."""
    directory = cache_dir() / "e2e" / "wheels"
    path = directory / WHEEL
    with build_lock(directory):
        if path.is_file():
            return path
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            requirements = Path(tmp) / "requirements.txt"
            requirements.write_text(f"impi-rt=={VERSION} --hash=sha256:{SHA256}\n")
            print(f"[mpiop images] downloading impi-rt {VERSION} from PyPI (72 MB, first time only)",
                  file=sys.stderr, flush=True)
            result = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                 "--require-hashes", "-r", str(requirements), "-d", tmp], check=False)
            if result.returncode != 0 or not (Path(tmp) / WHEEL).is_file():
                raise IntelMPIError(f"pip could not download impi-rt=={VERSION} (exit {result.returncode})")
            (Path(tmp) / WHEEL).replace(path)
    return path


def extract(dest: Path) -> Path:
    """The wheel's data tree in `dest` (created), with the executable bits the wheel records."""
    prefix = f"impi_rt-{VERSION}.data/data/"
    dest.mkdir(parents=True)
    with zipfile.ZipFile(wheel()) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            target = dest / info.filename.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out)
            target.chmod((info.external_attr >> 16) & 0o777 or 0o644)
    if not (dest / "bin" / "mpiexec.hydra").is_file():
        raise IntelMPIError(f"{WHEEL} has no bin/mpiexec.hydra")
    return dest
