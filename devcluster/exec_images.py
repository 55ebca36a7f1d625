"""The e2e images of exec launch, derived from the MPI image without building another rootfs.

- **mpi-nossh** (per MPI suite): the MPI image with every file of Debian's openssh packages removed (a layer of
  OCI whiteouts over the same base layer): no sshd, no ssh client, nothing a launch could fall back on; and a
  variant without /bin/sh, for the error a worker without a shell must give under exec launch.
- **kubectl**: the MPI image's base layer with this project's own kubectl (`.cache/kubernetes/<version>/bin`)
  in /usr/local/bin: what `--kubectl-image` must be, an image with sh, cp and kubectl on its PATH, with no
  registry pull.

Each archive names the MPI image's layer without carrying it (`oci.SharedLayer`): containerd, which holds it
once the MPI image is imported (devcluster/node.py imports an image's base first), stores it once, and the
disk holds 4 archives of kilobytes to 120 MiB instead of 4 copies of the MPI image's 1.9 GB.
"""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from devcluster import images, oci
from devcluster.binaries import build_lock, kube_binary
from devcluster.images import (
    BOOKWORM,
    PATH_ENV,
    REGISTRY,
    MpiSuite,
    cache_key,
    images_dir,
    log,
)
from devcluster.oci import Image, SharedLayer, write_oci_archive

OPENSSH_PACKAGES = ("openssh-server", "openssh-client", "openssh-sftp-server")
# /bin/sh on a merged-/usr Debian: what an image made without a shell (distroless) lacks.
NO_SHELL = ("usr/bin/sh",)
CONFIG = {"Env": [PATH_ENV], "Cmd": ["/bin/bash"], "WorkingDir": "/"}
RECIPE = "3"  # part of each key: a change of how these images are derived makes new ones


@contextmanager
def _base_layer(archive: Path) -> Iterator[tuple[SharedLayer, IO[bytes]]]:
    """The MPI image's one layer: how a derived archive names it, and its tar, read in place."""
    [layer] = oci.layers_of(archive)
    with tarfile.open(archive) as tar:
        stream = tar.extractfile(f"blobs/sha256/{layer.digest}")
        assert stream is not None
        yield layer, stream


def openssh_files(layer: Path | IO[bytes]) -> list[str]:
    """Every regular file the openssh packages installed in `layer`, as paths without a leading `./`.

    Only regular files: dpkg's lists also name directories, and on a merged-/usr Debian `/lib` is a symlink
    that a whiteout would take away from every program's dynamic loader. Symlinks left (`slogin`) dangle."""
    regular: dict[str, bool] = {}
    listed: list[str] = []
    lists = {f"var/lib/dpkg/info/{p}.list" for p in OPENSSH_PACKAGES}
    if isinstance(layer, Path):
        with layer.open("rb") as handle:
            return openssh_files(handle)
    with tarfile.open(fileobj=layer, mode="r|") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            regular[name] = member.isfile()
            if name in lists:
                data = tar.extractfile(member)
                assert data is not None
                listed += [line.strip().lstrip("/") for line in data.read().decode().splitlines() if line.strip()]
    return sorted({path for path in listed if regular.get(path)})


def whiteout_layer(paths: list[str], dest: Path) -> Path:
    """A layer that deletes `paths` from the layers below it (OCI whiteout files)."""
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            posix = PurePosixPath(path)
            info = tarfile.TarInfo(str(posix.parent / f".wh.{posix.name}"))
            info.mode = 0o644
            tar.addfile(info)
    return dest


def _file_layer(source: Path, path: str, dest: Path) -> Path:
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tar.gettarinfo(str(source), arcname=path)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755
        with source.open("rb") as handle:
            tar.addfile(info, handle)
    return dest


def _derived(name: str, key: str, build: Callable[[Path, Path], list[Path | SharedLayer]],
             suite: MpiSuite = BOOKWORM) -> Image:
    """An image of `suite`'s MPI image's layer (not repeated in its archive: `Image.base`) and more, from
    `build(mpi archive, scratch dir)` -> its layers."""
    mpi = images.mpi_image(suite)
    archive = images_dir() / f"{name}-{key}.tar"
    image = Image(f"{REGISTRY}/{name}:{key[:12]}", archive, base=mpi)
    if archive.is_file():
        return image
    with build_lock(images_dir()), tempfile.TemporaryDirectory(prefix=f"{name}-", dir=images_dir()) as tmp:
        if archive.is_file():
            return image
        log(f"building {image.ref}")
        write_oci_archive(archive, image.ref, build(mpi.archive, Path(tmp)), CONFIG)
        log(f"built {image.ref} ({archive.stat().st_size >> 20} MiB besides {mpi.ref}'s layer)")
    return image


def mpi_nossh_image(suite: MpiSuite = BOOKWORM, without: tuple[str, ...] = ()) -> Image:
    """`suite`'s MPI image with OpenSSH gone, and the files `without` names (e.g. NO_SHELL)."""
    mpi = images.mpi_image(suite)
    name = f"{suite.name}-nossh" + ("-" + "-".join(PurePosixPath(p).name for p in without) if without else "")

    def build(archive: Path, tmp: Path) -> list[Path | SharedLayer]:
        with _base_layer(archive) as (base, stream):
            return [base, whiteout_layer([*openssh_files(stream), *without], tmp / "no-openssh.tar")]

    return _derived(name, cache_key(name, RECIPE, mpi.archive.name, *OPENSSH_PACKAGES, *without), build, suite)


def kubectl_image() -> Image:
    """The MPI image's base (sh, cp) with this project's kubectl: the e2e's `--kubectl-image`."""
    mpi = images.mpi_image()
    kubectl = kube_binary("kubectl")

    def build(archive: Path, tmp: Path) -> list[Path | SharedLayer]:
        [base] = oci.layers_of(archive)
        return [base, _file_layer(kubectl, "usr/local/bin/kubectl", tmp / "kubectl.tar")]

    return _derived("kubectl", cache_key("kubectl", RECIPE, mpi.archive.name, oci.sha256_file(kubectl)), build)
