"""No tool or test reaches into another module's private names: what they need is a public, documented seam.

A `_name` is an implementation detail its module may change at will; a test that reads one breaks on a
refactor that keeps the behaviour, and a tool that does couples two packages through the back door. The
import contracts cannot see attribute access, so this scans the source: `x._name` on anything but
`self`, `cls` or `super()`, and `from module import _name`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "e2e", "bench", "testkit", "devcluster")
# Private names of other libraries, each with why there is no public way.
ALLOWED = {
    "_actions",  # argparse lists a parser's flags nowhere else (bench/operator_main.py)
}


def _is_own(node: ast.expr) -> bool:
    """`self`, `cls` or `super()`: an object reaching its own (or its base class's) names."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in ALLOWED


def private_reaches(source: str) -> list[tuple[int, str]]:
    """(line, code) of each reach into another object's or module's private name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _is_own(node.value):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"from {node.module} import {alias.name}")
                      for alias in node.names if _private(alias.name)]
    return found


def test_the_scan_finds_each_kind_of_reach_and_spares_an_objects_own() -> None:
    source = ("from mpiop.kube.informer import _MAX\nq._timer\nworker(2)._phase('x')\n"
              "self._own\ncls._own\nsuper()._send()\nx.__class__\nparser._actions\n")
    assert [line for line, _ in private_reaches(source)] == [1, 2, 3]


def test_no_tool_or_test_reaches_a_private_name() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {code}"
             for directory in SCANNED for path in sorted((ROOT / directory).rglob("*.py"))
             for line, code in private_reaches(path.read_text())]
    assert not found, "private names reached from outside (give them a public seam):\n" + "\n".join(found)
