"""MPIOP_NO_BUILD (the test session sets it in CI): a binary missing from the cache fails at once, naming it and
what makes it, instead of a build under a test's timeout; one that is there is used as before."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from devcluster import binaries, kueue, kwok
from devcluster.versions import ETCD_VERSION, HELM_VERSION, KUEUE_VERSION

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty MPIOP_CACHE_DIR, no KUBEBUILDER_ASSETS, nothing on PATH but the shell's tools, builds forbidden."""
    monkeypatch.setenv("MPIOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(binaries.NO_BUILD_ENV, "1")
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    return tmp_path / "cache"


@pytest.mark.parametrize(
    ("resolve", "named", "made_by"),
    [
        (kwok.kwok_binary, "kwok (kwok v0.8.0): not in", "run `make test-binaries` first"),
        (binaries.etcd_binary, f"etcd (etcd {ETCD_VERSION}", "run `make test-binaries` first"),
        (lambda: binaries.kube_binary("kubectl"), "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl",
         "run `make test-binaries` first"),
        (kueue.kueue_binary, f"kueue (Kueue {KUEUE_VERSION})", "run `make test-binaries` first"),
    ],
    ids=["kwok", "etcd", "kubernetes", "kueue"],
)
def test_a_missing_binary_is_refused_naming_it_and_what_makes_it(empty_cache: Path, resolve: Callable[[], Path],
                                                                  named: str, made_by: str) -> None:
    with pytest.raises(binaries.NotBuiltError) as refused:
        resolve()
    message = str(refused.value)
    print(message)
    assert message.startswith(named) and made_by in message and "MPIOP_NO_BUILD=1 forbids building" in message
    assert str(empty_cache) in message  # where it was looked for
    assert not any(p.name == "gomod" for p in empty_cache.rglob("*")), "no wrapper module was prepared"


def test_a_binary_already_built_is_used(empty_cache: Path) -> None:
    """`make test-binaries` run twice, or a test: a no-op once the binary and its Stages are in the cache."""
    built = kwok.kwok_dir() / "bin" / "kwok"
    built.parent.mkdir(parents=True)
    built.write_text("#!/bin/sh\n")
    stages = kwok.kwok_dir() / "stages"
    stages.mkdir()
    for stage in kwok.KWOK_DEFAULT_STAGES:
        (stages / Path(stage).name).write_text("kind: Stage\n")
    assert kwok.kwok_binary() == built
    assert kwok.kwok_stages_dir() == stages


def test_a_tool_of_hack_is_refused_too(empty_cache: Path) -> None:
    """hack/helm.sh: exit 1 and the same message, which the helm fixture's assertion shows."""
    result = subprocess.run(["bash", str(ROOT / "hack" / "helm.sh")], capture_output=True, text=True, timeout=60,
                            env={**os.environ}, check=False)
    print(result.stderr)
    assert result.returncode == 1 and result.stdout == ""
    assert f"helm (helm {HELM_VERSION}): not in {empty_cache}/helm/{HELM_VERSION}/bin" in result.stderr
    assert "MPIOP_NO_BUILD=1 forbids building" in result.stderr and "run `make test-binaries` first" in result.stderr


def test_builds_are_allowed_unless_the_switch_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, allowed in (("", True), ("0", True), ("1", False), ("yes", False)):
        monkeypatch.setenv(binaries.NO_BUILD_ENV, value)
        assert binaries.builds_allowed() is allowed, value
    monkeypatch.delenv(binaries.NO_BUILD_ENV)
    assert binaries.builds_allowed()


def test_a_go_module_not_in_gos_module_cache_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources read from a Go module (KWOK's Stages, kubeflow's CRD): only from Go's module cache (GOPROXY=off)."""
    monkeypatch.setenv(binaries.NO_BUILD_ENV, "1")
    with pytest.raises(binaries.NotBuiltError) as refused:
        binaries.go_mod_download("example.com/mpiop/never-published", "v0.0.1", tmp_path, "Dir")
    print(refused.value)
    assert str(refused.value).startswith("Go module example.com/mpiop/never-published@v0.0.1: not in Go's module cache")
