"""deploy/: where it is, its manifests read as objects, the Helm chart rendered, and the metric names the
shipped alerts and dashboard query."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from mpiop.api.raw import JSON

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "mpiop"
SYSTEM = "mpiop-system"
OVERLAY = DEPLOY / "overlays" / "prometheus"
RULES = OVERLAY / "prometheusrule.yaml"
DASHBOARD = OVERLAY / "dashboard.json"
_OURS = re.compile(r"\b(?:mpi_operator|mpiop)_[a-z0-9_]+")


def docs(text: str) -> list[JSON]:
    return [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]


def render(helm: str, *values: str, crds: bool = True) -> str:
    result = subprocess.run([helm, "template", "mpiop", str(CHART), "--namespace", SYSTEM,
                             *(["--include-crds"] if crds else []),
                             *(arg for value in values for arg in ("--set", value))],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rule_groups() -> dict[str, Any]:
    groups: dict[str, Any] = yaml.safe_load(RULES.read_text())["spec"]
    return groups


def queries() -> list[str]:
    """Every PromQL expression of the dashboard and the alerts."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    found = [t["expr"] for p in panels for t in p.get("targets", [])]
    return found + [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    return set(_OURS.findall(expr))
