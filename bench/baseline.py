"""The same burst on an earlier commit, in the same run: a regression of the operator's CPU shows in the run that
causes it, whatever the machine's load (its other processes slow both operators alike, and CPU seconds are each
operator's own).

`--against REV` checks REV out into a detached git worktree (kept under the system's temporary directory, by commit,
and reused) and adds it as an `--operator-source`; the runs alternate between this checkout and each source
(`--repeat 2` or more). `ratios()` prints each source's medians beside this checkout's and the ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from testkit.process import ROOT

THIS_CHECKOUT = "this checkout"
# Per run: the operator's CPU per unit of work, and how much work it did (passes a job, which its CPU follows).
COMPARED = (("burst_cpu_s_per_1k_pod_events", "CPU-s per 1,000 pod events"),
            ("burst_cpu_ms_per_reconcile", "CPU-ms per pass"),
            ("reconciles_per_job", "passes per job"),
            ("burst_operator_cpu_s", "operator CPU s"))


def checkout(rev: str, root: Path = ROOT) -> Path:
    """A detached worktree of `rev` (a commit, branch or HEAD~1 of `root`'s repository), made once per commit."""
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            capture_output=True, text=True, check=False)
    if commit.returncode != 0:
        raise SystemExit(f"--against {rev}: not a commit of {root}: {commit.stderr.strip()}")
    sha = commit.stdout.strip()
    path = Path(tempfile.gettempdir()) / f"mpiop-bench-{sha[:12]}"
    if not (path / "mpiop" / "__init__.py").is_file():
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "--force", str(path), sha],
                       check=True, capture_output=True)
    return path


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def ratios(runs: list[dict[str, Any]]) -> list[str]:
    """Each other source's medians beside this checkout's, and this checkout's over it: above 1, this one costs more."""
    mine = [r for r in runs if r.get("operator_source") == THIS_CHECKOUT]
    lines = []
    for source in sorted({str(r.get("operator_source")) for r in runs} - {THIS_CHECKOUT}):
        theirs = [r for r in runs if r.get("operator_source") == source]
        lines.append(f"this checkout ({len(mine)} runs) against {source} ({len(theirs)} runs), medians:")
        for key, label in COMPARED:
            here, there = _median(mine, key), _median(theirs, key)
            if here is None or there is None:
                continue
            ratio = f"{here / there:.2f}x" if there else "-"
            lines.append(f"  {label:<28} {here:>9.3f} against {there:>9.3f}  ratio {ratio}")
    return lines
