"""Container images for the e2e node, built without a Docker engine or a registry.

* the pause image: a tiny static C program (``e2e/images/pause.c``) in a one-file layer;
* the MPI images, one per Debian release (``MPI_SUITES``: bookworm's Open MPI 4.1, trixie's Open MPI 5 with
  PRRTE): a Debian rootfs made by ``debootstrap --variant=minbase`` with OpenSSH, Open MPI, MPICH and
  Python, customised in a chroot by ``e2e/images/customize-mpi.sh`` (sshd for root and non-root, the ssh
  client config, the ``mpiuser`` account, PyTorch and mpi4py with apt, Intel MPI from PyPI's impi-rt, the
  pi program compiled for the three MPI libraries);
* the operator image: the same kind of rootfs with Python and mpiop installed in a venv.

Each is written as an OCI image layout in a tar (``oci.py``), which ``ctr -n k8s.io images import`` takes. Everything is
cached under ``.cache/e2e/`` by a key made of its inputs (package lists, the asset files, this module's
``RECIPE_VERSION``), so a second run builds nothing. Chroot work runs in a private mount and PID namespace
(``unshare``), so an interrupted build leaves no mount or process behind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster import image_cache, intelmpi
from devcluster.binaries import build_lock, cache_dir, project_root
from devcluster.oci import Image, write_oci_archive

# Bump when the way images are made changes in a way the inputs below do not show.
RECIPE_VERSION = "1"
SUITE = "bookworm"  # the Debian release of the operator image and of the first MPI image
MIRROR = os.environ.get("MPIOP_DEBIAN_MIRROR", "http://deb.debian.org/debian")
REGISTRY = "mpiop.local"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# automake: without it configuring libltdl-dev (pulled in by libopenmpi-dev) fails in minbase.
MPI_PACKAGES = (
    "openssh-server", "openssh-client", "openmpi-bin", "libopenmpi-dev", "mpich", "libmpich-dev",
    "python3", "automake", "gcc-12", "libc6-dev", "procps",
)
OPERATOR_PACKAGES = ("python3", "python3-venv", "ca-certificates")


@dataclass(frozen=True)
class MpiSuite:
    """One MPI image: its name, the Debian release it is made from and the packages debootstrap installs.

    Each release brings its own MPI versions (bookworm: Open MPI 4.1, MPICH 4.0; trixie: Open MPI 5 on PRRTE,
    MPICH 4.2); the customization (customize-mpi.sh) is the same for all."""

    name: str
    release: str
    packages: tuple[str, ...] = MPI_PACKAGES


BOOKWORM = MpiSuite("mpi", "bookworm")
# gcc-12 is still packaged in trixie (its default is gcc-14): the same customize-mpi.sh builds pi there.
TRIXIE = MpiSuite("mpi-trixie", "trixie")
MPI_SUITES = {suite.name: suite for suite in (BOOKWORM, TRIXIE)}
# Directories whose content belongs to the runtime, not to the image.
_EXCLUDED = ("./dev/*", "./proc/*", "./sys/*", "./run/*", "./tmp/*", "./build", "./etc/resolv.conf",
             "./etc/hostname", "./var/cache/apt/archives/*.deb")


class ImageError(RuntimeError):
    """An image could not be built or imported."""


def log(message: str) -> None:
    print(f"[mpiop images] {message}", file=sys.stderr, flush=True)


def assets_dir() -> Path:
    root = project_root()
    if root is None or not (root / "e2e" / "images").is_dir():
        raise ImageError("the e2e images are built from a source checkout (e2e/images/ not found)")
    return root / "e2e" / "images"


def images_dir() -> Path:
    return cache_dir() / "e2e" / "images"


def cache_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256(RECIPE_VERSION.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:16]


def _file_key(paths: Iterable[Path]) -> bytes:
    return b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in sorted(paths))


def _run(argv: Sequence[str], **kwargs: Any) -> None:
    result = subprocess.run(list(argv), check=False, **kwargs)
    if result.returncode != 0:
        raise ImageError(f"`{' '.join(argv)}` failed (exit {result.returncode})")


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageError(f"building {what} needs root (debootstrap, chroot, unshare)")


# -- rootfs ------------------------------------------------------------------------------------------
def _unshared(argv: Sequence[str]) -> list[str]:
    """`argv` in a private mount + PID namespace: its mounts and processes end with it."""
    return ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", *argv]


def debootstrap_rootfs(packages: Sequence[str], release: str = SUITE) -> Path:
    """A cached minbase `release` rootfs with `packages` (and their dependencies); built once per package list."""
    _require_root("a Debian rootfs")
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is missing: run hack/install-e2e-deps.sh")
    key = cache_key(release, MIRROR, *sorted(packages))
    base = cache_dir() / "e2e" / "rootfs"
    target = base / f"{release}-{key}"
    with build_lock(base):
        if (target / ".complete").is_file():
            return target
        partial = base / f"{release}-{key}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        log(f"debootstrap --variant=minbase {release} with {', '.join(packages)} (first time only; minutes)")
        build_log = base / f"{release}-{key}.log"
        with build_log.open("wb") as out:
            result = subprocess.run(
                _unshared(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
                           release, str(partial), MIRROR]),
                stdout=out, stderr=subprocess.STDOUT, check=False,
            )
        if result.returncode != 0:
            tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-20:])
            debootstrap_log = partial / "debootstrap" / "debootstrap.log"
            if debootstrap_log.is_file():
                tail += "\n--- debootstrap.log\n" + "\n".join(debootstrap_log.read_text().splitlines()[-30:])
            raise ImageError(f"debootstrap failed (exit {result.returncode}); {build_log}:\n{tail}")
        (partial / ".complete").write_text("")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        return target


def run_in_chroot(rootfs: Path, script: str, env: dict[str, str] | None = None, network: bool = False) -> None:
    """Run a shell script as root inside `rootfs` with /proc and /dev, in a private namespace."""
    if network:
        shutil.copyfile("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
    variables = {"PATH": PATH_ENV.split("=", 1)[1], "HOME": "/root", "LANG": "C.UTF-8",
                 "DEBIAN_FRONTEND": "noninteractive", **(env or {})}
    inner = (
        'mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && mount -t tmpfs tmpfs "$R/tmp" && '
        'exec chroot "$R" /usr/bin/env -i "$@"'
    )
    argv = ["sh", "-c", inner, "sh", *(f"{k}={v}" for k, v in variables.items()), "/bin/sh", "-euxc", script]
    _run(_unshared(argv), env={**os.environ, "R": str(rootfs)})


def pack_rootfs(rootfs: Path, layer: Path) -> None:
    """The rootfs as one uncompressed layer tar (numeric owners, xattrs; no /dev, /proc, /sys content)."""
    _run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sort=name",
          *(f"--exclude={p}" for p in _EXCLUDED), "-C", str(rootfs), "-cf", str(layer), "."])


def _archive_path(name: str, packages: Sequence[str], script: str, inputs: Sequence[Path],
                  config: dict[str, Any], extra_key: bytes, release: str) -> Path:
    files = [p for p in inputs if p.is_file()]
    key = cache_key(name, release, MIRROR, *sorted(packages), script, _file_key(files), extra_key,
               json.dumps(config, sort_keys=True))
    return images_dir() / f"{name}-{key}.tar"


def _customized_image_cached(name: str, packages: Sequence[str], inputs: Sequence[Path], config: dict[str, Any],
                             extra_key: bytes, release: str = SUITE) -> bool:
    script = f"sh /build/{inputs[0].name}"
    return _archive_path(name, packages, script, inputs, config, extra_key, release).is_file()


def _customized_image(name: str, packages: Sequence[str], script: str, inputs: Sequence[Path],
                      config: dict[str, Any], network: bool = False, extra_key: bytes = b"",
                      release: str = SUITE) -> Image:
    """debootstrap (cached) -> copy -> copy `inputs` to /build -> `script` in chroot -> OCI archive.

    The cache key covers the packages, the script, the input files and `extra_key` (what a directory in
    `inputs` holds)."""
    archive = _archive_path(name, packages, script, inputs, config, extra_key, release)
    key = archive.stem.rsplit("-", 1)[1]
    out_dir = images_dir()
    image = Image(f"{REGISTRY}/{name}:{key[:12]}", archive)
    if archive.is_file():
        return image
    _require_root(f"the {name} image")
    base = debootstrap_rootfs(packages, release)
    out_dir.mkdir(parents=True, exist_ok=True)
    with build_lock(out_dir), tempfile.TemporaryDirectory(prefix=f"{name}-", dir=out_dir) as tmp:
        if archive.is_file():
            return image
        log(f"building {image.ref}")
        rootfs = Path(tmp) / "rootfs"
        _run(["cp", "-a", "--reflink=auto", str(base), str(rootfs)])
        (rootfs / ".complete").unlink(missing_ok=True)
        build = rootfs / "build"
        build.mkdir()
        for path in inputs:
            if path.is_dir():
                shutil.copytree(path, build / path.name)
            else:
                shutil.copy2(path, build / path.name)
        run_in_chroot(rootfs, script, network=network)
        layer = Path(tmp) / "layer.tar"
        pack_rootfs(rootfs, layer)
        write_oci_archive(archive, image.ref, [layer], config)
        log(f"built {image.ref} ({archive.stat().st_size >> 20} MiB) in {archive}")
        for old in image_cache.prune_older(out_dir, name):
            log(f"deleted the older archive {old.name}")
    return image


# -- the images ----------------------------------------------------------------------------------------
PAUSE_CONFIG = {"Entrypoint": ["/pause"], "User": "65535:65535", "WorkingDir": "/"}
MPI_CONFIG = {"Env": [PATH_ENV], "Cmd": ["/bin/bash"], "WorkingDir": "/"}


def _pause_image_address() -> Image:
    key = cache_key("pause", (assets_dir() / "pause.c").read_bytes(), json.dumps(PAUSE_CONFIG, sort_keys=True))
    return Image(f"{REGISTRY}/pause:{key[:12]}", images_dir() / f"pause-{key}.tar")


def _mpi_inputs() -> list[Path]:
    return [assets_dir() / n for n in ("customize-mpi.sh", "mpi-sshd", "mpi-wait-hosts", "ssh_client.conf", "pi.c",
                                       "mpiexec.hydra")]


def _mpi_image_built(suite: MpiSuite) -> bool:
    return _customized_image_cached(suite.name, suite.packages, _mpi_inputs(), MPI_CONFIG, intelmpi.KEY, suite.release)


def all_images_built() -> bool:
    """Whether every image of `all_images` is in the cache already (nothing to build, no disk space needed)."""
    return _pause_image_address().archive.is_file() and all(_mpi_image_built(s) for s in MPI_SUITES.values())


def pause_image() -> Image:
    """The pod sandbox image: a static `pause` binary, built with the host's gcc."""
    source = assets_dir() / "pause.c"
    image = _pause_image_address()
    out_dir, archive = images_dir(), image.archive
    if archive.is_file():
        return image
    if shutil.which("gcc") is None:
        raise ImageError("gcc is missing: run hack/install-e2e-deps.sh")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pause-", dir=out_dir) as tmp:
        binary = Path(tmp) / "pause"
        _run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(source)])
        layer = Path(tmp) / "layer.tar"
        with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
            info = tar.gettarinfo(str(binary), arcname="pause")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755
            with binary.open("rb") as handle:
                tar.addfile(info, handle)
        write_oci_archive(archive, image.ref, [layer], PAUSE_CONFIG)
    return image


def mpi_image(suite: MpiSuite = BOOKWORM) -> Image:
    """Debian `suite` + OpenSSH + Open MPI + MPICH + Intel MPI + Python with PyTorch and mpi4py; sshd on 2222 as root
    or not; pi for each MPI.

    PyTorch and mpi4py are Debian's CPU builds, installed with apt in the chroot (apt resolves their ~200
    dependencies, which debootstrap's resolver does not do reliably). Intel MPI's runtime comes from the
    pinned impi-rt wheel (`devcluster/intelmpi.py`), which is part of the cache key."""
    inputs, config = _mpi_inputs(), MPI_CONFIG
    name, packages, release = suite.name, suite.packages, suite.release
    if _mpi_image_built(suite):
        return _customized_image(name, packages, "sh /build/customize-mpi.sh", inputs, config,
                                 network=True, extra_key=intelmpi.KEY, release=release)
    with tempfile.TemporaryDirectory(prefix="intel-mpi-", dir=cache_dir()) as tmp:
        intel = intelmpi.extract(Path(tmp) / "intel-mpi")
        return _customized_image(name, packages, "sh /build/customize-mpi.sh", [*inputs, intel], config,
                                 network=True, extra_key=intelmpi.KEY, release=release)


def _operator_source(dest: Path) -> Path:
    """pyproject.toml, README.md and mpiop/ (no caches) copied to `dest`: what deploy/Dockerfile COPYs."""
    root = project_root()
    if root is None:
        raise ImageError("the operator image is built from a source checkout")
    dest.mkdir(parents=True)
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
    shutil.copy2(root / "README.md", dest / "README.md")
    shutil.copytree(root / "mpiop", dest / "mpiop", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def operator_image() -> Image:
    """mpiop in a venv on Debian's Python, run like deploy/Dockerfile's image (uid 65532, `mpiop run`)."""
    with tempfile.TemporaryDirectory(prefix="mpiop-src-") as tmp:
        source = _operator_source(Path(tmp) / "src")
        files = sorted(p for p in source.rglob("*") if p.is_file())
        source_key = b"".join(str(p.relative_to(source)).encode() + b"\0" + p.read_bytes() for p in files)
        config = {
            "Env": ["PATH=/opt/mpiop/bin:" + PATH_ENV.split("=", 1)[1], "PYTHONDONTWRITEBYTECODE=1",
                    "PYTHONUNBUFFERED=1", "HOME=/tmp"],
            "User": "65532:65532",
            "Entrypoint": ["mpiop", "run"],
            "Cmd": ["--leader-elect", "--log-format=json"],
            "WorkingDir": "/",
        }
        script = assets_dir() / "customize-operator.sh"
        wheels = Path(tmp) / "wheels"
        # The wheels are made here with this interpreter's pip (its index and CA settings), and installed
        # in the chroot without a network: the chroot trusts only Debian's CA bundle.
        if not _customized_image_cached("mpiop", OPERATOR_PACKAGES, [script], config, source_key):
            log("building wheels of mpiop and its dependencies for the operator image")
            _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(source)])
        else:
            wheels.mkdir()
        image = _customized_image("mpiop", OPERATOR_PACKAGES, "sh /build/customize-operator.sh",
                                  [script, wheels], config, extra_key=source_key)
        return image


def all_images() -> list[Image]:
    return [pause_image(), *(mpi_image(suite) for suite in MPI_SUITES.values())]


def _main(argv: list[str]) -> int:
    wanted = argv or ["pause", *MPI_SUITES]
    builders: dict[str, Callable[[], Image]] = {
        "pause": pause_image, "operator": operator_image,
        **{name: functools.partial(mpi_image, suite) for name, suite in MPI_SUITES.items()}}
    for name in wanted:
        image = builders[name]()
        print(f"{image.ref} {image.archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
