import pytest

from devcluster import binaries
from devcluster.versions import KUBERNETES_VERSION, staging_version


@pytest.mark.parametrize(
    ("kubernetes", "staging"),
    [("v1.34.4", "v0.34.4"), ("v1.30.0", "v0.30.0"), ("1.29.12", "v0.29.12")],
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
