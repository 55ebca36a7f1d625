"""devcluster.exec_images: the whiteouts that take OpenSSH out of the MPI image name its regular files only."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from devcluster import oci
from devcluster.exec_images import openssh_files, whiteout_layer


def _layer(path: Path, files: dict[str, bytes], dirs: list[str], links: dict[str, str]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, target in links.items():
            info = tarfile.TarInfo(f"./{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name in dirs:
            info = tarfile.TarInfo(f"./{name}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_openssh_files_are_the_packages_files_present_in_the_layer(tmp_path: Path) -> None:
    listed = (b"/.\n/lib\n/usr\n/usr/sbin\n/usr/sbin/sshd\n/usr/bin/ssh\n/usr/bin/slogin\n"
              b"/lib/systemd/system/ssh.service\n")
    layer = _layer(tmp_path / "layer.tar", {
        "usr/sbin/sshd": b"x", "usr/bin/ssh": b"x", "usr/bin/mpirun": b"x",
        "var/lib/dpkg/info/openssh-server.list": listed,
    }, ["usr", "usr/sbin", "usr/bin"], {"lib": "usr/lib", "usr/bin/slogin": "ssh"})
    # Directories, symlinks (merged /usr's /lib above all) and paths through them are kept.
    assert openssh_files(layer) == ["usr/bin/ssh", "usr/sbin/sshd"]
    whiteouts = whiteout_layer(openssh_files(layer), tmp_path / "wh.tar")
    with tarfile.open(whiteouts) as tar:
        assert tar.getnames() == ["usr/bin/.wh.ssh", "usr/sbin/.wh.sshd"]


def test_a_derived_archive_names_its_bases_layer_without_carrying_it(tmp_path: Path) -> None:
    base_layer = _layer(tmp_path / "base.tar", {"usr/bin/ssh": b"ssh" * 1000}, [], {})
    oci.write_oci_archive(tmp_path / "mpi.tar", "mpiop.local/mpi:1", [base_layer], {})
    [shared] = oci.layers_of(tmp_path / "mpi.tar")
    assert shared == oci.SharedLayer(oci.sha256_file(base_layer), base_layer.stat().st_size)

    extra = whiteout_layer(["usr/bin/ssh"], tmp_path / "wh.tar")
    oci.write_oci_archive(tmp_path / "derived.tar", "mpiop.local/derived:1", [shared, extra], {})
    with tarfile.open(tmp_path / "derived.tar") as tar:
        blobs = {name.removeprefix("blobs/sha256/") for name in tar.getnames()}
    assert shared.digest not in blobs and oci.sha256_file(extra) in blobs
    assert oci.layers_of(tmp_path / "derived.tar") == [shared, oci.SharedLayer(oci.sha256_file(extra),
                                                                               extra.stat().st_size)]
