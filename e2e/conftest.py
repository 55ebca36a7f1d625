"""The e2e session: one real node (devcluster/node.py) with the MPI image, the CRD, and per test a
fresh namespace and the operator (`mpiop run --namespace <ns>`, a real process) watching it.

Timings go to `.cache/e2e/report.json` and the terminal summary: node bring-up, and for each scenario the
seconds from creating the MPIJob to its final condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from devcluster import images
from devcluster.binaries import cache_dir
from devcluster.node import Node
from e2e.harness.kube import MPIJOBS, Api, ApiError, is_true, wait_for
from mpiop import names
from mpiop.api.v2beta1 import MPIJob

REPORT: dict[str, Any] = {"node": {}, "scenarios": {}}
REPORT_PATH = cache_dir() / "e2e" / "report.json"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The first test also pays for the node (and, on a fresh machine, for building it): a longer bound.
    for item in items:
        item.add_marker(pytest.mark.timeout(900))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT["node"] and not REPORT["scenarios"]:  # nothing ran (e.g. collection only)
        return
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(json.dumps(REPORT, indent=2))
    write = terminalreporter.write_line
    terminalreporter.section("mpiop e2e timings")
    node = REPORT["node"]
    if node:
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in node.items() if k != "total")
        write(f"node bring-up: {node['total']:.1f}s ({steps})")
    for name, seconds in REPORT["scenarios"].items():
        write(f"{name:<44} {seconds:6.1f}s")
    for key, log in REPORT.items():  # openmpi_pi_launcher_log, pytorch_ddp_launcher_log, ...
        if key.endswith("_log") and isinstance(log, str):
            write(f"{key.removesuffix('_log').replace('_', ' ')}:")
            for line in log.splitlines():
                write(f"  {line}")
    if differences := REPORT.get("pytorch_ddp_max_difference"):
        write(f"DDP vs single-process parameters, max |difference|: {differences}")
    write(f"(also in {REPORT_PATH})")


@dataclass
class E2E:
    """What a test gets: the node, an apiserver client, the MPI image, its namespace."""

    node: Node
    api: Api
    image: str
    ns: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def record(self, scenario: str, seconds: float) -> None:
        REPORT["scenarios"][scenario] = round(seconds, 1)

    def create_job(self, manifest: dict[str, Any]) -> float:
        """Create the MPIJob in this test's namespace; return the monotonic time it was created at."""
        started = time.monotonic()
        self.api.create(MPIJOBS.format(ns=self.ns), manifest)
        return started

    def job(self, name: str) -> dict[str, Any] | None:
        return self.api.mpijob(self.ns, name)

    def wait_finished(self, name: str, timeout: float = 300) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            job = self.job(name)
            return job if is_true(job, "Succeeded") or is_true(job, "Failed") else None

        result: dict[str, Any] = wait_for(finished, timeout, f"MPIJob {self.ns}/{name} to finish",
                                          describe=lambda: self.describe(name))
        return result

    def describe(self, name: str) -> str:
        """The job's conditions, its pods and the operator's log tail: what a failed wait prints."""
        lines = []
        job = self.job(name) or {}
        for cond in (job.get("status") or {}).get("conditions") or []:
            lines.append(f"  {cond['type']}={cond['status']} {cond.get('reason', '')}: {cond.get('message', '')}")
        for pod in self.api.pods(self.ns):
            statuses = [(s["name"], list(s.get("state", {}))) for s in pod["status"].get("containerStatuses", [])]
            lines.append(f"  pod {pod['metadata']['name']} {pod['status'].get('phase')} {statuses}")
        log = self.node.workdir / "logs" / f"operator-{self.ns}.log" if self.node.workdir else None
        if log and log.is_file():
            lines.append("  operator log tail:\n" + "\n".join(log.read_text().splitlines()[-15:]))
        return "\n".join(lines)

    def launcher_log(self, name: str, attempt: int | None = None) -> str:
        """The log of the launcher of `attempt` (default: the current one; each attempt's has its own name)."""
        job = self.job(name) or {}
        if attempt is None:
            attempt = (job.get("status") or {}).get("restartCount") or 0
        return self.api.logs(self.ns, names.launcher_name(MPIJob.model_validate(job), attempt))


@pytest.fixture(scope="session")
def e2e_session() -> Iterator[E2E]:
    if os.geteuid() != 0:
        pytest.fail("the e2e node needs root (containerd, mounts, cgroups, a bridge); run `make e2e` as root")
    mpi = images.mpi_image()
    node = Node(extra_images=[mpi])
    node.start()
    REPORT["node"] = {k: round(v, 1) for k, v in node.timings.items()}
    try:
        assert node.control_plane is not None
        api = Api(node.control_plane.server, node.control_plane.ssl_context())
        crd = subprocess.run([sys.executable, "-m", "mpiop", "crd"], capture_output=True, text=True, check=True).stdout
        node.kubectl("apply", "--server-side", "-f", "-", input_text=crd)
        wait_for(lambda: is_true(api.get_or_none("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                                 "mpijobs.kubeflow.org"), "Established"), 60, "the CRD")
        yield E2E(node, api, mpi.ref)
    finally:
        node.stop()


def _operator_flags() -> list[str]:
    """Probe and metrics servers off where this mpiop has them (tests run one operator after another)."""
    help_text = subprocess.run([sys.executable, "-m", "mpiop", "run", "--help"], capture_output=True, text=True,
                               check=False).stdout
    return ["--health-addr", "0", "--metrics-addr", "0"] if "--health-addr" in help_text else []


@pytest.fixture
def bare(e2e_session: E2E, request: pytest.FixtureRequest) -> Iterator[E2E]:
    """A fresh namespace, deleted afterwards (with its pods), and no operator."""
    short = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    ns = f"{short}-{secrets.token_hex(2)}"
    api = e2e_session.api
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30,
                 f"the default ServiceAccount of {ns}")
        yield E2E(e2e_session.node, api, e2e_session.image, ns)
    finally:
        _delete_namespace(api, ns)


@contextlib.contextmanager
def operator_process(bare: E2E) -> Iterator[subprocess.Popen[bytes]]:
    """A real `mpiop run` process watching only `bare`'s namespace, its caches synced; stopped afterwards."""
    assert bare.node.workdir is not None
    log_path = bare.node.workdir / "logs" / f"operator-{bare.ns}.log"
    env = dict(os.environ)
    if source := os.environ.get("MPIOP_E2E_OPERATOR_SOURCE"):
        # Development aid: run the operator from another checkout (e.g. `git archive HEAD`), not this tree.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    with log_path.open("wb") as log:
        operator = subprocess.Popen(
            [sys.executable, "-m", "mpiop", "run", "--kubeconfig", str(bare.node.kubeconfig),
             "--namespace", bare.ns, "--log-format", "console", *_operator_flags()],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=os.environ.get("MPIOP_E2E_OPERATOR_SOURCE") or None,
        )
    try:
        wait_for(lambda: operator.poll() is not None or "caches synced" in log_path.read_text(), 60,
                 "the operator to sync its caches", describe=lambda: log_path.read_text()[-2000:])
        assert operator.poll() is None, f"mpiop exited:\n{log_path.read_text()[-3000:]}"
        yield operator
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(timeout=10)


@pytest.fixture
def e2e(bare: E2E) -> Iterator[E2E]:
    """A fresh namespace with the operator (a real `mpiop run` process) watching only it."""
    with operator_process(bare):
        yield bare


def _delete_namespace(api: Api, ns: str) -> None:
    """Delete the namespace and wait (bounded) until its pods are gone, so the next test has the CPUs."""
    try:
        api.delete(f"/api/v1/namespaces/{ns}")
        for pod in api.pods(ns):
            api.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", grace_seconds=0)
        wait_for(lambda: not api.pods(ns), 60, f"the pods of {ns} to go")
    except (ApiError, AssertionError) as err:
        print(f"cleaning up {ns}: {err}", file=sys.stderr)

