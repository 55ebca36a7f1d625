"""A real Prometheus server (hack/prometheus.sh) for tests: it scrapes mpiop processes and evaluates the alert
rules deploy/ ships, on loopback, with its data in a temporary directory; a child the kernel kills if the test
process dies. Read through its HTTP API: instant queries, alerts by state, rule health."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import re
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from devcluster.controlplane import die_with_parent, free_port
from mpiop.api.raw import JSON
from testkit.deploy import DASHBOARD, rule_groups
from testkit.process import terminate

# Grafana's variable: max(4 scrape intervals, the panel's step). 1m is what it is for a 15 s scrape interval.
RATE_INTERVAL = "1m"


def dashboard_queries(rate_interval: str = RATE_INTERVAL) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard target, with Grafana's `$__rate_interval` filled in."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    found = [(p["title"], t["expr"].replace("$__rate_interval", rate_interval))
             for p in panels for t in p.get("targets", [])]
    for _, expr in found:
        assert "$" not in expr, f"a Grafana variable this test does not fill in: {expr}"
    return found


def rules_with_for(shortened: str) -> tuple[JSON, dict[str, str]]:
    """The shipped rule groups with every `for:` replaced by `shortened` (expressions and windows untouched),
    and each alert's shipped `for:`."""
    groups = rule_groups()
    shipped: dict[str, str] = {}
    for group in groups["groups"]:
        for rule in group["rules"]:
            shipped[rule["alert"]] = rule.get("for", "0s")
            if "for" in rule:
                rule["for"] = shortened
    return groups, shipped


@dataclass
class Series:
    labels: dict[str, str]
    value: float


class PrometheusServer:
    """`prometheus` on 127.0.0.1:<free port> scraping `targets` (host:port) every `interval`, evaluating `rules`
    (a rule file's groups) as often."""

    def __init__(self, binary: str, workdir: Path, targets: Iterable[str], rules: JSON,
                 interval: str = "1s") -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        (workdir / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(workdir / "rules.yaml")],
            "scrape_configs": [{"job_name": "mpiop", "static_configs": [{"targets": list(targets)}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.binary, f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=die_with_parent, start_new_session=True, cwd=self.workdir)

    def version(self) -> str:
        result = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30, check=True)
        return (result.stdout or result.stderr).splitlines()[0]

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with aiohttp.ClientSession() as session, session.get(f"{self.url}/-/ready") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)  # poll interval: the server starts within seconds
        raise TimeoutError(f"prometheus not ready after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def _get(self, path: str, **params: str) -> Any:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
                session.get(f"{self.url}{path}", params=params) as response:
            body = await response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    async def query(self, expr: str) -> list[Series]:
        """An instant query's series (a vector's samples, or the one scalar)."""
        data = await self._get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [Series({}, float(data["result"][1]))]
        return [Series(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]

    async def history(self, expr: str, seconds: int = 300) -> list[str]:
        """Each series of `expr` over the last `seconds`, as "labels: value@time ..." lines (for a failure's
        report)."""
        data = await self._get("/api/v1/query", query=f"{expr}[{seconds}s]")
        return [f"{s['metric']}: " + " ".join(f"{v}@{float(t):.1f}" for t, v in s["values"]) for s in data["result"]]

    async def alerts(self) -> dict[str, str]:
        """Active alerts by name: "pending" or "firing" ("firing" when any of its series fires)."""
        states: dict[str, str] = {}
        for alert in (await self._get("/api/v1/alerts"))["alerts"]:
            name = alert["labels"]["alertname"]
            if states.get(name) != "firing":
                states[name] = alert["state"]
        return states

    async def rules(self) -> dict[str, JSON]:
        """Each alerting rule's state as the rule manager reports it (health, lastError, lastEvaluation)."""
        groups = (await self._get("/api/v1/rules", type="alert"))["groups"]
        return {r["name"]: r for g in groups for r in g["rules"]}

    async def evaluated_after(self, wall: float) -> bool:
        """Whether every alerting rule has been evaluated at or after `wall` (seconds since the epoch; the server
        runs on this machine's clock). What a test that asserts an alert did not fire waits for: the evaluations
        that would have fired it, which a starved server may not have run when a sleep of as long ends."""
        rules = await self.rules()
        return bool(rules) and all(epoch_seconds(r["lastEvaluation"]) >= wall for r in rules.values())

    def stop(self, grace: float = 10.0) -> None:
        terminate(self.process, grace)


def epoch_seconds(stamp: str) -> float:
    """An RFC 3339 time as Prometheus writes it (Go's: up to nanoseconds, `Z` or an offset) in seconds since the
    epoch."""
    match = re.fullmatch(r"(.+T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    whole, fraction, zone = match.groups()
    seconds = dt.datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return seconds + float(f"0.{fraction or 0}")


def finite(series: Iterable[Series]) -> list[Series]:
    return [s for s in series if not math.isnan(s.value)]

