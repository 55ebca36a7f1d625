"""devcluster.image_cache: after a build, the newest archives of that image stay, every other image's too."""

from __future__ import annotations

import os
from pathlib import Path

from devcluster.image_cache import prune_older


def _archive(directory: Path, name: str, mtime: int) -> Path:
    path = directory / name
    path.write_bytes(b"")
    os.utime(path, (mtime, mtime))
    return path


def test_the_two_newest_archives_of_the_image_stay_and_other_images_are_not_touched(tmp_path: Path) -> None:
    oldest = _archive(tmp_path, "mpi-trixie-0000000000000001.tar", 100)
    older = _archive(tmp_path, "mpi-trixie-0000000000000002.tar", 200)
    kept = [_archive(tmp_path, "mpi-trixie-0000000000000004.tar", 400),
            _archive(tmp_path, "mpi-trixie-0000000000000003.tar", 300)]
    others = [_archive(tmp_path, "mpi-trixie-nossh-0000000000000009.tar", 50),  # its name begins with the image's
              _archive(tmp_path, "mpi-trixie-nossh-000000000000000a.tar", 60),
              _archive(tmp_path, "mpi-trixie-nossh-000000000000000b.tar", 70),
              _archive(tmp_path, "mpi-trixie-notes.tar", 10)]  # not an archive name this cache writes
    assert sorted(prune_older(tmp_path, "mpi-trixie")) == [oldest, older]
    assert sorted(tmp_path.iterdir()) == sorted(kept + others)


def test_nothing_goes_while_there_are_no_more_than_keep(tmp_path: Path) -> None:
    only = _archive(tmp_path, "mpiop-00000000000000ff.tar", 1)
    assert prune_older(tmp_path, "mpiop") == []
    assert prune_older(tmp_path, "mpiop", keep=1) == []
    assert only.exists()
