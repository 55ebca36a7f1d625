"""How many built image archives `.cache/e2e/images` keeps: each archive is named `<image>-<16 hex key>.tar`
and is 0.3-2 GB, and every change to an image's recipe, inputs or (for the operator image) mpiop's source
makes a new one. After a build the newest KEEP of that image stay: the one just built, and one more for a
second checkout (a worktree, a CI clone) sharing the cache on an older commit."""

from __future__ import annotations

import re
from pathlib import Path

KEEP = 2


def prune_older(directory: Path, image: str, keep: int = KEEP) -> list[Path]:
    """Delete all but the `keep` newest archives of `image` (not of another image whose name it begins, like
    `mpi-trixie` of `mpi-trixie-nossh`); the deleted paths."""
    pattern = re.compile(rf"{re.escape(image)}-[0-9a-f]{{16}}\.tar")
    archives = sorted((p for p in directory.glob(f"{image}-*.tar") if pattern.fullmatch(p.name)),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
    return archives[keep:]
