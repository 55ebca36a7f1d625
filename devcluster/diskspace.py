"""Free disk space for the e2e node, checked before building or starting it, so that a full disk is named up
front instead of surfacing as a pod that never starts (the kubelet reports DiskPressure and taints the node)
or a half-written image archive.

The figures are what this project's `.cache/e2e/` grew to on a brand-new machine (README, e2e section): the
MPI images' debootstrap roots and archives plus containerd's content store and unpacked snapshots."""

from __future__ import annotations

import shutil
from pathlib import Path

GIB = 1 << 30
# A first `make e2e` (nothing built, nothing imported): images and roots 7 GiB, containerd 8 GiB, and a
# scratch copy of the largest root while its image is packed.
FIRST_RUN_BYTES = 18 * GIB
# A node whose images are built: containerd unpacks what it has not imported yet, pods write logs.
NODE_START_BYTES = 3 * GIB


class DiskSpaceError(RuntimeError):
    """Less disk is free than the e2e node needs."""


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def require_free(path: Path, needed: int, what: str) -> None:
    """Raise DiskSpaceError, naming `path`, what needs the space and both figures, when less is free."""
    free = shutil.disk_usage(nearest_existing(path)).free
    if free < needed:
        raise DiskSpaceError(f"{what} needs {needed / GIB:.0f} GiB free on the file system of {path}; "
                             f"{free / GIB:.1f} GiB is: free some space (or set MPIOP_CACHE_DIR elsewhere)")
