"""Go tools built on the project's Kubernetes: one wrapper module per tool that pins every module the Kubernetes
binaries are built from to the version they use.

On a new machine compiling is what takes the time, and the tools the suite builds (KWOK, helm, scheduler-plugins,
controller-gen) and the e2e node's CoreDNS would each compile k8s.io/api, apimachinery, client-go, grpc, otel and
protobuf again at their own versions. Pinned, and built like Kubernetes (`binaries.go_build`: no -trimpath, cgo
as it is), a package they share with it is the same compile action, which Go's build cache answers; each tool
compiles only its own. So these builds come after Kubernetes' control plane (its build lock): two `go build`s
side by side would compile the same package twice.

A tool whose code needs a newer version of a module than the project's Kubernetes has (pflag, KWOK's CRI client)
keeps its own version of that module (`unpinned`). Kueue's manager is one of them: the release on v0.34
(devcluster/versions.py).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from devcluster import binaries
from devcluster.versions import KUBERNETES_VERSION


def pinned_versions(kubernetes_go_mod: str) -> dict[str, str]:
    """Every module of the Kubernetes binaries' wrapper module (required or replaced) -> its version there."""
    pinned = dict(re.findall(r"^\t(\S+) (v\S+)(?: // indirect)?$", kubernetes_go_mod, re.M))
    pinned |= {module: version for module, _, version
               in re.findall(r"^(?:replace )?\s*(\S+) => (\S+) (v\S+)$", kubernetes_go_mod, re.M)}
    require = re.search(r"^require (k8s\.io/kubernetes) (v\S+)$", kubernetes_go_mod, re.M)
    if require:
        pinned[require.group(1)] = require.group(2)
    return pinned


def pinned_go_mod(name: str, require: str, kubernetes_go_mod: str, unpinned: Iterable[str] = ()) -> str:
    """A module `name` requiring `require` (``module version``) with every module the Kubernetes binaries are
    built from replaced by the version they use, but the required module itself and `unpinned`."""
    keep = {require.split()[0], *unpinned}
    replaces = "".join(f"\t{m} => {m} {v}\n" for m, v in sorted(pinned_versions(kubernetes_go_mod).items())
                       if m not in keep)
    return f"module {name}\n\ngo 1.24.0\n\nrequire {require}\n\nreplace (\n{replaces})\n"


def build_pinned(root: Path, commands: dict[str, str], *, require: str, what: str, ldflags: str,
                 unpinned: Iterable[str] = (), built_by: str = binaries.TEST_BINARIES,
                 kubernetes_version: str = KUBERNETES_VERSION) -> Path:
    """Build `commands` (binary name -> Go package) of the module `require` into `root/bin`, once, in a wrapper
    module pinned to the Kubernetes binaries' modules, after them; return the bin directory. With another
    `kubernetes_version` (a tool with no release for the project's), pinned to that Kubernetes' modules instead:
    it then compiles them again, but once for every tool pinned to it."""
    bin_dir = root / "bin"
    if all((bin_dir / c).is_file() for c in commands):
        return bin_dir
    binaries.refuse_build(f"{', '.join(sorted(commands))} ({what})", bin_dir, built_by)
    binaries.ensure_all(binaries.CONTROL_PLANE)  # first: what the tool shares with it is then in Go's cache
    module = f"mpiop.local/{root.parent.name}"

    def write_module(workdir: Path) -> None:
        kubernetes = binaries.kubernetes_module(kubernetes_version)
        binaries.write_wrapper_module(workdir, module, require, commands.values())
        go_mod = pinned_go_mod(module, require, (kubernetes / "go.mod").read_text(), unpinned)
        (workdir / "go.mod").write_text(go_mod)
        shutil.copyfile(kubernetes / "go.sum", workdir / "go.sum")  # last: marks the module written

    return binaries.build_in_wrapper(root, commands, what=what, ldflags=ldflags, write_module=write_module,
                                     tidy=False, built_by=built_by)
