"""The alerting rules and the Grafana dashboard shipped in deploy/overlays/prometheus (and the Helm chart).

promtool is taken out of Debian's prometheus package by hack/promtool.sh into .cache/, with the server. The
rule groups are taken out of the PrometheusRule, checked (`promtool check rules`) and every alert is unit-tested
(`promtool test rules` with alerts_test.yaml). That the queries name only metrics mpiop exports is checked
against a real operator's /metrics in test_metrics.py (`exported_families`, `metric_names`); that each query
returns a series and each alert fires when it should, by a real Prometheus scraping mpiop, in test_prometheus.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.deploy import (
    CHART,
    DASHBOARD,
    OVERLAY,
    RULES,
    docs,
    metric_names,
    queries,
    render,
    rule_groups,
)

ALERTS = ("MPIJobsFailing", "MPIJobRestartStorm", "MPIOperatorNotLeading", "MPIOperatorReconcileErrors",
          "MPIOperatorWorkQueueGrowing")


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The rule groups as a plain Prometheus rule file, next to the unit tests that load it."""
    (tmp_path / "mpiop.rules.yaml").write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    shutil.copy(OVERLAY / "alerts_test.yaml", tmp_path / "alerts_test.yaml")
    return tmp_path


def test_promtool_checks_the_rules(promtool: str, rules_dir: Path) -> None:
    result = subprocess.run([promtool, "check", "rules", "mpiop.rules.yaml"], cwd=rules_dir, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


def test_promtool_unit_tests_every_alert(promtool: str, rules_dir: Path) -> None:
    result = subprocess.run([promtool, "test", "rules", "alerts_test.yaml"], cwd=rules_dir, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load((rules_dir / "alerts_test.yaml").read_text())["tests"]
    firing = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if not t["exp_alerts"]}
    defined = {r["alert"] for g in rule_groups()["groups"] for r in g["rules"]}
    assert defined == set(ALERTS)
    assert firing == quiet == defined, "each alert is tested firing and not firing"


def test_every_query_uses_mpiops_metrics() -> None:
    for expr in queries():
        assert metric_names(expr), f"a query without an mpiop metric: {expr}"


def test_the_chart_renders_the_overlays_rules_and_dashboard(helm: str) -> None:
    rendered = docs(render(helm, "metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true",
                           crds=False))
    rule = next(d for d in rendered if d["kind"] == "PrometheusRule")
    assert rule["spec"] == rule_groups()
    dashboard = next(d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "mpiop-dashboard")
    assert json.loads(dashboard["data"]["mpiop.json"]) == json.loads(DASHBOARD.read_text())
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert (CHART / "files" / "prometheusrule.yaml").resolve() == RULES.resolve()

