"""The commands the README and docs/ tell a reader to type exist: every `make` target in a code span or at
the start of a code line is a Makefile target, every `mpiop` subcommand answers --help, and every
`python -m` module is found in this checkout."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAKE = re.compile(r"(?:^|`)[ \t]*make ([a-z0-9][\w-]*)", re.M)
MPIOP = re.compile(r"(?:`|bin/)mpiop ([a-z][\w-]*)")
MODULE = re.compile(r"python -m ([a-z_][\w.]*)")


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_make_target_and_module_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text()
    assert set(MAKE.findall(text)) <= make_targets(), set(MAKE.findall(text)) - make_targets()
    missing = {m for m in MODULE.findall(text) if importlib.util.find_spec(m.rstrip(".")) is None}
    assert not missing, f"{doc.name} names modules that do not exist: {missing}"


def test_the_readme_names_make_targets_at_all() -> None:
    assert {"run", "test", "dev-cluster-down"} <= set(MAKE.findall((ROOT / "README.md").read_text()))


def test_every_mpiop_subcommand_a_doc_names_answers_help() -> None:
    named = {sub for doc in DOCS for sub in MPIOP.findall(doc.read_text())}
    assert "run" in named
    for sub in sorted(named):
        shown = subprocess.run([sys.executable, "-m", "mpiop", sub, "--help"], capture_output=True, text=True,
                               timeout=60, check=False)
        assert shown.returncode == 0, f"`mpiop {sub}` named in the docs: {shown.stderr}"


def test_the_bench_doc_is_method_and_current_results() -> None:
    """docs/bench.md says how mpiop is measured and what it measures now, in at most 1,500 words; each figure's
    history is in git."""
    words = len((ROOT / "docs" / "bench.md").read_text().split())
    assert words <= 1500, f"docs/bench.md has {words} words"
