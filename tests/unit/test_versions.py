import pytest

from devcluster import binaries, pinned
from devcluster.versions import ETCD_VERSION, KUBERNETES_VERSION, staging_version


@pytest.mark.parametrize(
    ("kubernetes", "staging"),
    [("v1.37.2", "v0.37.2"), ("v1.30.0", "v0.30.0"), ("1.29.12", "v0.29.12")],
    ids=["pinned", "older-minor", "without-v"],
)
def test_staging_modules_are_tagged_v0_minor_patch(kubernetes: str, staging: str) -> None:
    assert staging_version(kubernetes) == staging


def test_a_non_v1_kubernetes_version_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected Kubernetes version"):
        staging_version("v2.0.0")


def test_ldflags_stamp_the_pinned_version_into_both_version_packages() -> None:
    flags = binaries.version_ldflags(KUBERNETES_VERSION)
    assert f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}" in flags
    assert f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}" in flags


def test_kubebuilder_assets_win_over_path(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho Kubernetes v0.0.1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert binaries.from_assets_or_path("kube-apiserver", KUBERNETES_VERSION) == fake


def test_a_path_binary_of_another_version_is_ignored(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "kube-scheduler"
    fake.write_text("#!/bin/sh\necho Kubernetes v1.20.0\n")
    fake.chmod(0o755)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert binaries.from_assets_or_path("kube-scheduler", KUBERNETES_VERSION) is None


def _fake_binary(path, text: str):  # type: ignore[no-untyped-def]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{text}'\n")
    path.chmod(0o755)
    return path


def test_etcd_on_path_is_never_used_even_when_a_build_is_needed(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _fake_binary(tmp_path / "path" / "etcd", "etcd Version: 3.4.23")
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setenv("MPIOP_CACHE_DIR", str(tmp_path / "cache"))
    cached = _fake_binary(binaries.etcd_dir() / "bin" / "etcd", "etcd Version: 3.6.16")
    assert binaries.etcd_binary() == cached


def test_etcd_from_kubebuilder_assets_wins_over_the_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assets = _fake_binary(tmp_path / "assets" / "etcd", "etcd Version: 3.5.0")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    monkeypatch.setenv("MPIOP_CACHE_DIR", str(tmp_path / "cache"))
    _fake_binary(binaries.etcd_dir() / "bin" / "etcd", "etcd Version: 3.6.16")
    assert binaries.etcd_binary() == assets


def test_etcd_is_built_with_its_release_as_git_sha_into_a_directory_of_its_own(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MPIOP_CACHE_DIR", str(tmp_path))
    assert f"-X go.etcd.io/etcd/api/v3/version.GitSHA={ETCD_VERSION}" in binaries.etcd_ldflags()
    # A build without the flag (an older checkout's, at etcd/<version>) is neither reused nor replaced.
    assert binaries.etcd_dir().parent == tmp_path / "etcd"
    assert binaries.etcd_dir().name.startswith(f"{ETCD_VERSION}-")


@pytest.mark.parametrize(
    ("package", "binary"),
    [("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"), ("go.etcd.io/etcd/server/v3", "server")],
    ids=["plain", "major-version-suffix"],
)
def test_go_build_names_a_binary_after_the_package_without_its_major_version(package: str, binary: str) -> None:
    assert binaries.go_binary_name(package) == binary


def test_the_etcd_wrapper_module_requires_the_server_module_without_its_replaces(tmp_path) -> None:  # type: ignore[no-untyped-def]
    binaries.write_wrapper_module(tmp_path, "mpiop.local/etcdbin", f"{binaries.ETCD_PACKAGE} {ETCD_VERSION}",
                                  [binaries.ETCD_PACKAGE])
    go_mod = (tmp_path / "go.mod").read_text()
    assert f"require go.etcd.io/etcd/server/v3 {ETCD_VERSION}" in go_mod and "replace" not in go_mod
    assert '_ "go.etcd.io/etcd/server/v3"' in (tmp_path / "tools.go").read_text()


KUBEBINS_GO_MOD = """module mpiop.local/kubebins

go 1.24.0

require k8s.io/kubernetes v1.34.4

require (
\tgithub.com/go-logr/logr v1.4.2 // indirect
\tgolang.org/x/net v0.38.0 // indirect
)

replace k8s.io/api => k8s.io/api v0.34.4
"""


def test_a_pinned_module_pins_every_module_of_the_kubernetes_binaries_to_their_version() -> None:
    go_mod = pinned.pinned_go_mod("mpiop.local/scheduler-plugins", "sigs.k8s.io/scheduler-plugins v0.34.7",
                                  KUBEBINS_GO_MOD)
    assert go_mod.startswith("module mpiop.local/scheduler-plugins\n")
    assert "require sigs.k8s.io/scheduler-plugins v0.34.7" in go_mod
    for pin in ("k8s.io/kubernetes => k8s.io/kubernetes v1.34.4", "k8s.io/api => k8s.io/api v0.34.4",
                "github.com/go-logr/logr => github.com/go-logr/logr v1.4.2",
                "golang.org/x/net => golang.org/x/net v0.38.0"):
        assert f"\t{pin}\n" in go_mod
    assert pinned.pinned_versions(KUBEBINS_GO_MOD) == {
        "k8s.io/kubernetes": "v1.34.4", "k8s.io/api": "v0.34.4", "github.com/go-logr/logr": "v1.4.2",
        "golang.org/x/net": "v0.38.0"}


def test_a_module_the_tool_needs_newer_and_the_tool_itself_are_left_at_its_versions() -> None:
    """KWOK's code needs its own pflag; a tool that is itself in Kubernetes' module graph is not pinned down."""
    go_mod = pinned.pinned_go_mod("mpiop.local/kwok", "golang.org/x/net v0.51.0", KUBEBINS_GO_MOD,
                                  unpinned=["github.com/go-logr/logr"])
    assert "golang.org/x/net =>" not in go_mod and "github.com/go-logr/logr =>" not in go_mod
    assert "\tk8s.io/api => k8s.io/api v0.34.4\n" in go_mod
