"""bench.baseline: the burst on an earlier commit beside this checkout's, and the ratio of each figure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import run as bench_run
from bench.baseline import THIS_CHECKOUT, checkout, ratios


def run(source: str, per_1k: float, passes: float, cpu: float) -> dict[str, object]:
    return {"operator_source": source, "burst_cpu_s_per_1k_pod_events": per_1k, "reconciles_per_job": passes,
            "burst_operator_cpu_s": cpu, "load_before": "0.5 0.5 0.5"}


def test_each_figure_is_this_checkouts_median_over_the_sources() -> None:
    runs = [run(THIS_CHECKOUT, 1.0, 5.0, 10.0), run("/tmp/old", 0.5, 5.0, 5.0),
            run(THIS_CHECKOUT, 3.0, 5.0, 14.0), run("/tmp/old", 0.7, 4.0, 7.0)]
    lines = ratios(runs)
    assert lines[0] == "this checkout (2 runs) against /tmp/old (2 runs), medians:"
    assert lines[1] == "  CPU-s per 1,000 pod events       2.000 against     0.600  ratio 3.33x"
    assert lines[2] == "  passes per job                   5.000 against     4.500  ratio 1.11x"
    assert lines[3] == "  operator CPU s                  12.000 against     6.000  ratio 2.00x"
    assert len(lines) == 4  # CPU-ms per pass was not measured: no line for it


def test_without_another_source_there_is_nothing_to_compare() -> None:
    assert ratios([run(THIS_CHECKOUT, 1.0, 5.0, 10.0)]) == []


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_revision_is_checked_out_once_into_a_worktree_of_its_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "mpiop").mkdir(parents=True)
    git(repo, "init", "-q")
    for version in ("old", "new"):
        (repo / "mpiop" / "__init__.py").write_text(f"VERSION = {version!r}\n")
        git(repo, "add", ".")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", version)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path = checkout("HEAD~1", repo)
    assert (path / "mpiop" / "__init__.py").read_text() == "VERSION = 'old'\n"
    assert path.name == f"mpiop-bench-{git(repo, 'rev-parse', 'HEAD~1')[:12]}"
    assert checkout("HEAD~1", repo) == path  # the same commit: the same worktree, not a second one
    assert git(repo, "worktree", "list").count("mpiop-bench-") == 1


def test_a_revision_that_is_no_commit_is_an_error_naming_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    with pytest.raises(SystemExit, match="--against nope: not a commit"):
        checkout("nope", repo)


def test_another_operator_gets_at_least_one_burst_of_its_own(tmp_path: Path) -> None:
    """Without --repeat, `--against`/`--operator-source` ran only this checkout's burst and printed no ratio."""
    assert bench_run.parse_args(["--phases", "burst", "--operator-source", str(tmp_path)]).repeat == 2
    assert bench_run.parse_args(["--phases", "burst", "--operator-source", str(tmp_path), "--repeat", "4"]).repeat == 4
