"""The e2e session as the tests see it: the node, an apiserver client, the MPI image and a namespace
(`E2E`), the report of timings, and a real `mpiop run` process watching one namespace."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devcluster import images
from devcluster.binaries import cache_dir
from devcluster.node import Node
from devcluster.nodehost import GATEWAY
from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from testkit.e2e.kube import MPIJOBS, Api, ApiError, is_true, wait_for
from testkit.process import ROOT, OperatorProcess

REPORT: dict[str, Any] = {"node": {}, "scenarios": {}}
REPORT_PATH = cache_dir() / "e2e" / "report.json"
SHARED_FILE = "shared-node.json"  # in the node's workdir: what processes attaching to the node need (share_node)
# `suite` parameters: an Open MPI scenario on each MPI image (images.MPI_SUITES), named by its Open MPI.
OPENMPI = [pytest.param(images.BOOKWORM.name, id="openmpi4"), pytest.param(images.TRIXIE.name, id="openmpi5")]


@dataclass
class E2E:
    """What a test gets: the node, an apiserver client, the MPI image, its namespace (and its operator)."""

    node: Node
    api: Api
    image: str
    ns: str = ""
    suite: str = images.BOOKWORM.name
    mpi_images: dict[str, str] = field(default_factory=dict)  # suite -> imported image ref (the session's)
    timings: dict[str, float] = field(default_factory=dict)
    operator: OperatorProcess | None = None  # the `mpiop run` watching `ns`, while `operator_process` runs it

    def record(self, scenario: str, seconds: float) -> None:
        suffix = "" if self.suite == images.BOOKWORM.name else f" [{self.suite}]"
        REPORT["scenarios"][scenario + suffix] = round(seconds, 1)

    def report(self, key: str, value: object) -> None:
        """REPORT[key] (e.g. a launcher's log, printed at the end), one per suite."""
        REPORT[key if self.suite == images.BOOKWORM.name else f"{self.suite.replace('-', '_')}_{key}"] = value

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


@contextlib.contextmanager
def operator_process(bare: E2E, *flags: str) -> Iterator[OperatorProcess]:
    """A real `mpiop run` process (with `flags`) watching only `bare`'s namespace, its caches synced, as
    `bare.operator`; stopped afterwards."""
    assert bare.node.workdir is not None
    env, cwd = {}, ROOT
    if source := os.environ.get("MPIOP_E2E_OPERATOR_SOURCE"):
        # Development aid: run the operator from another checkout (e.g. `git archive HEAD`), not this tree.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
        cwd = Path(source)
    # The status endpoint on the node's bridge, where the pods reach the host.
    operator = OperatorProcess(bare.node.kubeconfig, bare.node.workdir / "logs" / f"operator-{bare.ns}.log",
                               ["--namespace", bare.ns, *flags], env=env, cwd=cwd, status_host=GATEWAY)
    operator.start()

    def tail(lines: int) -> str:
        return "\n".join(operator.log_lines()[-lines:])

    try:
        # Bounds for a loaded node (the last test's pods still going), not for a healthy start (about 2 s).
        wait_for(lambda: not operator.running() or any("caches synced" in line for line in operator.log_lines()),
                 120, "the operator to sync its caches", describe=lambda: tail(20))
        assert operator.running(), f"mpiop exited:\n{tail(30)}"
        bare.operator = operator
        yield operator
    finally:
        bare.operator = None
        operator.stop()


@contextlib.contextmanager
def node_session() -> Iterator[E2E]:
    """The node up (bookworm's MPI image imported), the CRD established: what every e2e scenario and the bench's
    node phase run on. The node is stopped afterwards; its bring-up times land in REPORT."""
    mpi = images.mpi_image()
    node = Node(extra_images=[mpi])
    node.start()
    REPORT["node"] = {k: round(v, 1) for k, v in node.timings.items()}
    try:
        assert node.control_plane is not None
        REPORT["control_plane"] = node.control_plane.describe()
        api = Api(node.control_plane.server, node.control_plane.ssl_context())
        crd = subprocess.run([sys.executable, "-m", "mpiop", "crd"], capture_output=True, text=True, check=True).stdout
        node.kubectl("apply", "--server-side", "-f", "-", input_text=crd)
        wait_for(lambda: is_true(api.get_or_none("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                                 "mpijobs.kubeflow.org"), "Established"), 60, "the CRD")
        yield E2E(node, api, mpi.ref, mpi_images={images.BOOKWORM.name: mpi.ref})
    finally:
        node.stop()


def share_node(session: E2E) -> Path:
    """Write what another process needs to use `session`'s node (attach_node): the node's record (workdir,
    kubeconfig, apiserver, CA), and the MPI images imported so far. Returns the file."""
    assert session.node.workdir is not None
    path = session.node.workdir / SHARED_FILE
    path.write_text(json.dumps({"node": session.node.attach_record(), "image": session.image,
                                "mpi_images": session.mpi_images}, indent=2))
    return path


def attach_node(path: Path) -> E2E:
    """The session of a node another process runs and shared (share_node): nothing is started, nothing stopped."""
    shared = json.loads(path.read_text())
    node = Node.attach(shared["node"])
    assert node.control_plane is not None
    api = Api(node.control_plane.server, node.control_plane.ssl_context())
    return E2E(node, api, shared["image"], mpi_images=dict(shared["mpi_images"]))


def merge_report(into: dict[str, Any], other: dict[str, Any]) -> None:
    """`other` (a worker's REPORT) into `into`: nested dicts merged key by key, anything else replaced."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_report(into[key], value)
        else:
            into[key] = value


def suite_image(session: E2E, suite: str) -> str:
    """The ref of `suite`'s MPI image, built (cached) and imported into the node the first time this process asks
    for it (whether it is imported already, the node decides: Node.import_images, under its lock)."""
    if suite not in session.mpi_images:
        image = images.mpi_image(images.MPI_SUITES[suite])
        begin = time.monotonic()
        session.node.import_images([image])
        REPORT["node"][f"import {suite}"] = round(time.monotonic() - begin, 1)
        session.mpi_images[suite] = image.ref
    return session.mpi_images[suite]


@contextlib.contextmanager
def fresh_namespace(session: E2E, prefix: str, suite: str = images.BOOKWORM.name) -> Iterator[E2E]:
    """A new namespace `<prefix>-<4 hex>` with its default ServiceAccount, on `suite`'s image; deleted afterwards
    with its pods."""
    short = re.sub(r"[^a-z0-9-]", "-", prefix)[:40].strip("-")
    ns = f"{short}-{secrets.token_hex(2)}"
    api = session.api
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 120,
                 f"the default ServiceAccount of {ns}")
        yield E2E(session.node, api, suite_image(session, suite), ns, suite, session.mpi_images)
    finally:
        _delete_namespace(api, ns)


def _delete_namespace(api: Api, ns: str) -> None:
    """Delete the namespace and wait (bounded) until its pods are gone, so the next test has the CPUs."""
    try:
        api.delete(f"/api/v1/namespaces/{ns}")
        for pod in api.pods(ns):
            api.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", grace_seconds=0)
        wait_for(lambda: not api.pods(ns), 60, f"the pods of {ns} to go")
    except (ApiError, AssertionError, OSError) as err:  # OSError: the apiserver slow to answer (urllib's timeout)
        print(f"cleaning up {ns}: {err}", file=sys.stderr)
