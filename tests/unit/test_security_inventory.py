"""docs/security.md's inventory ("Every surface an attacker controls") names every surface the code has.

Issue 60: last round closed exactly the holes it was told of, and the next ones were beside them. So what an
attacker can reach is enumerated from the code, not from memory: the routes of the apps the process serves (built
here with the functions `mpiop run` builds them with), the ports it listens on, the informers of `Caches.build`,
the label and annotation names mpiop reads or writes, and the metrics whose labels carry a value. Each must have a
row in its table of that section, found by a stable token in backticks; a surface added without a row fails here,
naming it. The scans of the source (every `router.add_*`, `web.Application(`, `Informer(` and `servers.start(`)
make sure nothing is built somewhere these builders do not reach.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from mpiop import metrics, server
from mpiop.controller.caches import Caches
from mpiop.desired.podgroup import gang_scheduler
from mpiop.kube.client import KubeClient
from mpiop.serving import layout_webhook, status_endpoint
from mpiop.serving.token_reviews import TokenReviews

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
SOURCE = ROOT / "mpiop"
SECTION = "## Every surface an attacker controls"
ROUTES, WATCHED, NAMES, METRICS = ("Ports and routes", "Watched kinds", "Labels and annotations",
                                   "Metrics and their labels")
# Where the apps the process serves are built: each function below is called here, so its routes are enumerated.
APP_BUILDERS = {("mpiop.server", "health_app"), ("mpiop.server", "metrics_app"),
                ("mpiop.serving.status_endpoint", "status_app"), ("mpiop.serving.layout_webhook", "add_route")}


def section(text: str) -> str:
    """The inventory: from its heading to the next second-level heading."""
    assert SECTION in text, f"docs/security.md has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def table_rows(text: str, heading: str) -> list[str]:
    """The table rows (lines starting with '|') under `### heading` of the inventory, up to the next heading."""
    parts = re.split(r"^### (.+)$", section(text), flags=re.MULTILINE)
    found = {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    assert heading in found, f"the inventory has no subsection '### {heading}' (it has {sorted(found)})"
    return [line for line in found[heading].splitlines() if line.startswith("|")]


def missing(rows: list[str], wanted: dict[str, list[str]]) -> list[str]:
    """What of `wanted` (a surface: the tokens its row must hold) has no row holding every token in backticks."""
    return [f"{what}: no row with {' and '.join(f'`{t}`' for t in tokens)}" for what, tokens in sorted(wanted.items())
            if not any(all(f"`{t}`" in row for t in tokens) for row in rows)]


def dummy_client() -> KubeClient:
    """A client nothing is sent through: building the apps and the informers does no I/O."""
    return KubeClient.__new__(KubeClient)


def caches() -> Caches:
    """Every informer `Caches.build` can make: gang scheduling, nodes, claim templates and DRA all on."""
    return Caches.build(dummy_client(), None, gang_scheduler=gang_scheduler("volcano"), watch_nodes=True,
                        watch_claim_templates=True)


def served_apps() -> list[web.Application]:
    """The apps `mpiop run` serves, built as process.run and status_serving.serve_status build them."""
    client = dummy_client()
    status = status_endpoint.status_app(caches(), TokenReviews(client), status_endpoint.StatusWriter(client))
    layout_webhook.add_route(status, lambda: None, 1000)
    return [server.health_app(server.Checks({}, {})), server.metrics_app(CollectorRegistry()), status]


def routes() -> dict[str, list[str]]:
    """Each route as `METHOD path` (HEAD, which aiohttp adds beside each GET, is its GET's row)."""
    found = {}
    for app in served_apps():
        for route in app.router.routes():
            method = "GET" if route.method == "HEAD" else route.method
            assert route.resource is not None
            token = f"{method} {route.resource.canonical}"
            found[token] = [token]
    return found


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SOURCE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        yield name, ast.parse(path.read_text(), str(path))


def calls_by_function(predicate: str) -> set[tuple[str, str]]:
    """(module, top-level function) of every call whose source matches `predicate` (a regular expression)."""
    found = set()
    for module, tree in modules():
        for top in tree.body:
            for node in ast.walk(top):
                if isinstance(node, ast.Call) and re.fullmatch(predicate, ast.unparse(node.func)):
                    found.add((module, getattr(top, "name", "<module>")))
    return found


def listening_flags() -> set[str]:
    """The flag of each address `servers.start(app, args.<x>_addr, ...)` listens on, as `--x-addr`."""
    flags = set()
    for _, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("servers.start"):
                address = node.args[1] if len(node.args) > 1 else None
                assert isinstance(address, ast.Attribute), f"an address not from a flag: {ast.unparse(node)}"
                flags.add("--" + address.attr.replace("_", "-"))
    return flags


def informers() -> dict[str, list[str]]:
    """Each informer as its resource's plural and the trim that says what (and how much) it keeps."""
    built = caches()
    return {f"{i.resource.group or 'core'}/{i.resource.plural}":
            [i.resource.plural, getattr(i.trim, "func", i.trim).__name__]  # a partial: the trim it binds
            for i in built.all() + ([built.pod_groups] if built.pod_groups is not None else [])}


def label_and_annotation_names() -> dict[str, list[str]]:
    """Every module-level `*_LABEL` or `*_ANNOTATION` string constant of mpiop, by its value."""
    found = {}
    for module, tree in modules():
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and re.fullmatch(r"[A-Z_]+_(LABEL|ANNOTATION)", target.id):
                        found[f"{module}.{target.id}"] = [node.value.value]
    return found


def labelled_metrics() -> dict[str, list[str]]:
    """Every metric of mpiop/metrics.py with labels, as `name{label,...}`: a label's value is what may be someone
    else's (a reason, a name). Unlabelled ones only count."""
    return {name: [f"{name}{{{','.join(labels)}}}"] for name, labels in metrics.labelled().items()}


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text()


def test_every_route_of_every_served_app_has_a_row(doc: str) -> None:
    found = routes()
    assert {"GET /healthz", "GET /metrics", f"POST {layout_webhook.PATH}"} <= set(found), found  # the build is real
    assert missing(table_rows(doc, ROUTES), found) == []


def test_routes_and_apps_are_made_only_where_this_test_builds_them() -> None:
    added = calls_by_function(r".*\.router\.add_\w+") | calls_by_function(r"(web\.)?Application")
    assert added and added <= APP_BUILDERS, (
        f"routes or apps made outside {sorted(APP_BUILDERS)}: {sorted(added - APP_BUILDERS)}; build them in "
        "served_apps() and give each route a row in docs/security.md")


def test_every_port_has_a_row(doc: str) -> None:
    flags = listening_flags()
    assert {"--health-addr", "--metrics-addr", "--status-addr"} <= flags, flags
    assert missing(table_rows(doc, ROUTES), {flag: [flag] for flag in flags}) == []


def test_every_informer_has_a_row_naming_its_resource_and_trim(doc: str) -> None:
    found = informers()
    assert len(found) >= 14, found
    assert missing(table_rows(doc, WATCHED), found) == []


def test_informers_are_made_only_by_caches_build() -> None:
    made = calls_by_function(r"Informer")
    assert made == {("mpiop.controller.caches", "Caches")}, (
        f"informers made outside Caches.build: {sorted(made)}; give each a row in docs/security.md")


def test_every_label_and_annotation_name_has_a_row(doc: str) -> None:
    found = label_and_annotation_names()
    assert "mpiop.names.LAUNCH_ANNOTATION" in found and "mpiop.names.ATTEMPT_LABEL" in found, found
    assert missing(table_rows(doc, NAMES), found) == []


def test_every_labelled_metric_has_a_row_naming_its_labels(doc: str) -> None:
    found = labelled_metrics()
    assert "mpiop_jobs_restarted" in found and "mpi_operator_job_info" in found, found
    assert missing(table_rows(doc, METRICS), found) == []


def test_a_surface_without_a_row_is_named() -> None:
    rows = ["| `GET /healthz` | any pod |"]
    assert missing(rows, {"GET /healthz": ["GET /healthz"], "POST /new": ["POST /new"]}) == [
        "POST /new: no row with `POST /new`"]
