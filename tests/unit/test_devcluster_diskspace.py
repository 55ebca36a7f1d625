"""devcluster.diskspace: a full disk is named before the e2e node builds or starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster import diskspace


def test_enough_free_space_passes(tmp_path: Path) -> None:
    diskspace.require_free(tmp_path / "not" / "made" / "yet", 1, "a test")


def test_too_little_free_space_names_the_path_the_need_and_what_is_free(tmp_path: Path) -> None:
    with pytest.raises(diskspace.DiskSpaceError) as refused:
        diskspace.require_free(tmp_path / "e2e", 1 << 60, "building the e2e node's images")
    message = str(refused.value)
    assert f"building the e2e node's images needs {(1 << 60) >> 30} GiB free on the file system of {tmp_path / 'e2e'}" \
        in message
    assert "GiB is: free some space" in message


def test_the_nearest_existing_directory_is_measured(tmp_path: Path) -> None:
    assert diskspace.nearest_existing(tmp_path / "a" / "b") == tmp_path


def test_the_node_checks_free_space_before_building_any_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m devcluster.node prepare` on a machine without the images: the check comes first, so a full disk
    is named instead of filling up halfway through debootstrap (it used to ask the builders themselves)."""
    from devcluster import images, node, oci

    monkeypatch.setenv("MPIOP_CACHE_DIR", str(tmp_path))
    assert not images.all_images_built()

    def build_nothing() -> list[oci.Image]:
        raise AssertionError("an image was built before the free space was checked")

    monkeypatch.setattr(images, "all_images", build_nothing)
    monkeypatch.setattr(diskspace, "FIRST_RUN_BYTES", 1 << 60)
    with pytest.raises(diskspace.DiskSpaceError, match="building the e2e node's images needs"):
        node.prepare()
