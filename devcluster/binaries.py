"""Find the Kubernetes and etcd binaries, or build them from their Go modules into a cache.

Order, per Kubernetes binary: ``KUBEBUILDER_ASSETS`` (the controller-runtime envtest convention), then
``PATH`` (only when the binary reports the pinned version, so a stray older kubectl is not mixed in), then
the cache, which the first caller fills with ``go build`` from a small wrapper module that requires
``k8s.io/kubernetes`` and replaces every ``k8s.io/*`` staging module with its ``v0.Y.Z`` tag. etcd: only
``KUBEBUILDER_ASSETS`` or the cache (built the same way from ``go.etcd.io/etcd/server/v3``), never PATH.

With ``MPIOP_NO_BUILD=1`` (the test session sets it in CI: tests/conftest.py) nothing is built or downloaded: a
binary missing from the cache, or a Go module missing from Go's module cache, raises NotBuiltError naming it and
what makes it (`make test-binaries`), instead of a build that would run under a test's timeout. A build already
running in another process (the lock) is still waited for: Kueue's, which .ci/run starts in the background.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from devcluster.versions import ETCD_VERSION, KUBERNETES_VERSION, OLDEST_KUBERNETES_VERSION, staging_version

KUBE_COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
}
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"
# Built together on first use; the kubelet only when a node is asked for (it is the slowest).
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BinaryError(RuntimeError):
    """A binary could not be found or built."""


class NotBuiltError(BinaryError):
    """A binary (or a Go module's files) is missing where MPIOP_NO_BUILD forbids making it."""


NO_BUILD_ENV = "MPIOP_NO_BUILD"
TEST_BINARIES = "`make test-binaries`"  # what builds every binary the test suite needs


def builds_allowed() -> bool:
    """False when MPIOP_NO_BUILD is set (not empty, not 0): the test session in CI."""
    return os.environ.get(NO_BUILD_ENV, "") in ("", "0")


def refuse_build(what: str, where: Path | str, built_by: str = TEST_BINARIES) -> None:
    """Raise NotBuiltError, naming `what` is missing from `where` and `built_by`, unless builds are allowed."""
    if not builds_allowed():
        raise NotBuiltError(f"{what}: not in {where}, and {NO_BUILD_ENV}=1 forbids building or downloading here (it "
                            f"would run under a test's timeout); run {built_by} first")


def project_root() -> Path | None:
    """The source checkout this package runs from, if any (editable installs)."""
    candidate = Path(__file__).resolve().parents[1]
    return candidate if (candidate / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """Where built binaries live: $MPIOP_CACHE_DIR, else the checkout's git-ignored .cache/."""
    if env := os.environ.get("MPIOP_CACHE_DIR"):
        return Path(env)
    root = project_root()
    if root is not None:
        return root / ".cache"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mpiop"


def kube_bin_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_dir() / "kubernetes" / version / "bin"


def report(message: str) -> None:
    """A build step's progress on stderr (builds take minutes; the other tools of devcluster say theirs too)."""
    print(f"[mpiop binaries] {message}", file=sys.stderr, flush=True)


def _reports_version(path: Path, version: str) -> bool:
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except OSError:
        return False
    return re.search(rf"\b{re.escape(version)}\b", out) is not None


def _from_assets(name: str) -> Path | None:
    if assets := os.environ.get("KUBEBUILDER_ASSETS"):
        candidate = Path(assets) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def from_assets_or_path(name: str, version: str) -> Path | None:
    if found := _from_assets(name):
        return found
    which = shutil.which(name)
    return Path(which) if which and _reports_version(Path(which), version) else None


@contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Serialise builds between processes (pytest and `python -m devcluster up` may race)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"waiting for another process's build in {directory}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def go_tool() -> str:
    go = shutil.which("go")
    if go is None:
        raise BinaryError("Go is needed to build the Kubernetes binaries, and `go` is not on PATH")
    return go


def _run_go(args: list[str], cwd: Path) -> None:
    refuse_build(f"the output of `go {' '.join(args[:2])}`", cwd)  # a backstop: builders refuse first, by name
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    result = subprocess.run([go_tool(), *args], cwd=cwd, env=env, check=False)
    if result.returncode != 0:
        raise BinaryError(f"`go {' '.join(args)}` failed in {cwd} (exit {result.returncode})")


def go_mod_download(module: str, version: str, workdir: Path, want: str, *, built_by: str = TEST_BINARIES) -> Path:
    """`go mod download -json module@version`: the path it reports under `want` (Dir, GoMod, ...).

    Builds not allowed (MPIOP_NO_BUILD), only from Go's module cache (GOPROXY=off): a module not there raises
    NotBuiltError naming `built_by`."""
    offline = {} if builds_allowed() else {"GOPROXY": "off"}
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off", **offline}
    out = subprocess.run(
        [go_tool(), "mod", "download", "-json", f"{module}@{version}"],
        cwd=workdir, env=env, capture_output=True, text=True, check=False,
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 and offline:
        refuse_build(f"Go module {module}@{version}", "Go's module cache (go env GOMODCACHE)", built_by)
    if out.returncode != 0 or want not in info:
        raise BinaryError(f"cannot download {module}@{version}: {info.get('Error', out.stderr)}")
    return Path(info[want])


def _staging_replaces(version: str, workdir: Path) -> list[str]:
    """The k8s.io staging modules, read from k8s.io/kubernetes's own go.mod at that version."""
    text = go_mod_download("k8s.io/kubernetes", version, workdir, "GoMod").read_text()
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", text, flags=re.M)))


def write_wrapper_module(workdir: Path, name: str, require: str, packages: Iterable[str],
                         replaces: Iterable[str] = ()) -> None:
    """A go.mod requiring `require` (``module version``) with `replaces`, and a tools.go importing the
    commands' packages so that `go mod tidy` keeps their dependencies."""
    workdir.mkdir(parents=True, exist_ok=True)
    replace_lines = "".join(f"replace {r}\n" for r in replaces)
    (workdir / "go.mod").write_text(f"module {name}\n\ngo 1.24.0\n\nrequire {require}\n\n{replace_lines}")
    imports = "".join(f'\t_ "{p}"\n' for p in sorted(packages))
    (workdir / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")


def go_binary_name(package: str) -> str:
    """The file `go build -o dir/` writes for a package: its last element, or the one before a /vN suffix."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v\d+", parts[-1]) and len(parts) > 1 else parts[-1]


def _prepare_wrapper(root: Path, *, what: str, write_module: Callable[[Path], None], tidy: bool = True) -> Path:
    """`root/gomod`, written (and tidied) once; its go.sum is written last, so it marks a finished module."""
    workdir = root / "gomod"
    if not (workdir / "go.sum").is_file():
        report(f"preparing the Go wrapper module for {what} in {workdir}")
        write_module(workdir)
        if tidy:
            _run_go(["mod", "tidy"], workdir)
    return workdir


def build_in_wrapper(root: Path, commands: dict[str, str], *, what: str, ldflags: str,
                     write_module: Callable[[Path], None], tidy: bool = True, built_by: str = TEST_BINARIES) -> Path:
    """Build `commands` (binary name -> Go package) in the wrapper module `root/gomod` into `root/bin`.

    For Go modules whose go.mod has replace directives, which `go install module@version` refuses: the
    wrapper requires the module instead, so its replaces are ignored and its required versions used.
    `tidy=False`: `write_module` writes a go.sum itself, and `go build -mod=mod` adds what is missing."""
    bin_dir = root / "bin"
    with build_lock(root):
        missing = [c for c in sorted(commands) if not (bin_dir / c).is_file()]
        if not missing:
            return bin_dir
        refuse_build(f"{', '.join(missing)} ({what})", bin_dir, built_by)
        workdir = _prepare_wrapper(root, what=what, write_module=write_module, tidy=tidy)
        report(f"building {', '.join(missing)} ({what}; first time only, minutes on 2 cores)")
        staging_out = root / "bin.partial"
        staging_out.mkdir(parents=True, exist_ok=True)
        go_build(workdir, [commands[c] for c in missing], staging_out, ldflags)
        bin_dir.mkdir(parents=True, exist_ok=True)
        for command in missing:
            (staging_out / go_binary_name(commands[command])).replace(bin_dir / command)
        return bin_dir


def go_build(workdir: Path, packages: Iterable[str], out_dir: Path, ldflags: str) -> None:
    """`go build` of `packages` in the wrapper module `workdir` into `out_dir`, as every binary here is built.

    Without -trimpath: with it, Go keys a dependency's compiled package by the version its module graph
    selects, which differs between Kubernetes' wrapper module and a tool's pinned to the same modules
    (devcluster/pinned.py); without it, by the module's directory, which is the same, so the tool compiles
    only what Kubernetes has not."""
    _run_go(["build", "-ldflags", ldflags, "-o", f"{out_dir}/", *packages], workdir)


def version_ldflags(version: str) -> str:
    major, minor, _patch = version.lstrip("v").split(".")
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _write_kubernetes_module(workdir: Path, version: str) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text("module mpiop.local/kubebins\n\ngo 1.24.0\n")  # for `go mod download`
    staging = staging_version(version)
    write_wrapper_module(workdir, "mpiop.local/kubebins", f"k8s.io/kubernetes {version}", KUBE_COMMANDS.values(),
                         [f"{m} => {m} {staging}" for m in _staging_replaces(version, workdir)])


def build_kubernetes(commands: Iterable[str], version: str = KUBERNETES_VERSION) -> Path:
    """Build the named commands of k8s.io/kubernetes@version into the cache; return the bin dir.

    Its wrapper module pins every k8s.io staging module to its v0.Y.Z tag, as scheduler-plugins does."""
    return build_in_wrapper(kube_bin_dir(version).parent, {c: KUBE_COMMANDS[c] for c in commands},
                            what=f"Kubernetes {version}", ldflags=version_ldflags(version),
                            write_module=lambda workdir: _write_kubernetes_module(workdir, version))


def kubernetes_module(version: str = KUBERNETES_VERSION) -> Path:
    """The Kubernetes binaries' wrapper module directory (go.mod and go.sum), prepared if it is not yet."""
    root = kube_bin_dir(version).parent
    with build_lock(root):
        return _prepare_wrapper(root, what=f"Kubernetes {version}",
                                write_module=lambda workdir: _write_kubernetes_module(workdir, version))


def etcd_ldflags(version: str = ETCD_VERSION) -> str:
    """`etcd --version` names the release it was built from: its Git SHA is the tag (the Go module proxy
    serves no commit hash), not "Not provided (use ./build instead of go build)"."""
    return f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={version}"


def etcd_dir(version: str = ETCD_VERSION) -> Path:
    """The build's directory, named by the version and its link flags: a build with other flags (an older
    checkout's, maybe in use) stays where it is."""
    flags = hashlib.sha256(etcd_ldflags(version).encode()).hexdigest()[:8]
    return cache_dir() / "etcd" / f"{version}-{flags}"


def build_etcd(version: str = ETCD_VERSION) -> Path:
    """Build etcd from go.etcd.io/etcd/server/v3 into the cache (through a wrapper module: its go.mod has
    replace directives pointing at the sibling modules of its repository); return the binary."""
    def write_module(workdir: Path) -> None:
        write_wrapper_module(workdir, "mpiop.local/etcdbin", f"{ETCD_PACKAGE} {version}", [ETCD_PACKAGE])

    return build_in_wrapper(etcd_dir(version), {"etcd": ETCD_PACKAGE}, what=f"etcd {version}",
                            ldflags=etcd_ldflags(version), write_module=write_module) / "etcd"


def kube_binary(name: str, version: str = KUBERNETES_VERSION) -> Path:
    """Path to a Kubernetes binary of the pinned version, building it (and its siblings) if needed."""
    if found := from_assets_or_path(name, version):
        return found
    cached = kube_bin_dir(version) / name
    if cached.is_file():
        return cached
    group = CONTROL_PLANE if name in CONTROL_PLANE else (name,)
    return build_kubernetes(group, version) / name


def etcd_binary(version: str = ETCD_VERSION) -> Path:
    """etcd from KUBEBUILDER_ASSETS, else the pinned release built into the cache; never PATH, where a
    distribution's older etcd (Debian's 3.4) would silently change what the apiserver can do."""
    return _from_assets("etcd") or build_etcd(version)


def ensure_all(names: Iterable[str], version: str = KUBERNETES_VERSION) -> dict[str, Path]:
    """Resolve several binaries at once so that missing ones are built in a single `go build`."""
    names = list(names)
    kube = [n for n in names if n in KUBE_COMMANDS]
    missing = [
        n for n in kube
        if from_assets_or_path(n, version) is None and not (kube_bin_dir(version) / n).is_file()
    ]
    if missing:
        build_kubernetes(missing, version)
    resolved = {n: kube_binary(n, version) for n in kube}
    if "etcd" in names:
        resolved["etcd"] = etcd_binary()
    return resolved


# What a control plane of the oldest supported minor runs (tests marked `oldest_minor`, `make test`): its own
# apiserver and controller-manager; etcd and kubectl are the project's (kubectl is the user's, of any minor).
OLDEST_CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--oldest"]:
        for binary, location in ensure_all(OLDEST_CONTROL_PLANE, OLDEST_KUBERNETES_VERSION).items():
            print(f"{binary:<24} {location} ({OLDEST_KUBERNETES_VERSION})")
    else:
        for binary, location in ensure_all(["etcd", *CONTROL_PLANE]).items():
            print(f"{binary:<24} {location}")
