"""The e2e session: one real node (devcluster/node.py) with the MPI image, the CRD, and per test a
fresh namespace and the operator (`mpiop run --namespace <ns>`, a real process) watching it.

A test runs on bookworm's MPI image (Open MPI 4.1) unless it parametrizes `suite` (e.g. with
testkit.e2e.session.OPENMPI): the trixie image (Open MPI 5 on PRRTE) is built and imported the first time a
test asks for it. Open MPI 5's scenarios are selectable with `-k openmpi5`, MPICH on trixie with `-k trixie`.

Timings go to `.cache/e2e/report.json` and the terminal summary: node bring-up, and for each scenario the
seconds from creating the MPIJob to its final condition.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import exec_images, images
from testkit.e2e.exec_launch import import_exec_images, import_once, restrict_namespace
from testkit.e2e.session import E2E, REPORT, REPORT_PATH, fresh_namespace, node_session, operator_process


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
    if plane := REPORT.get("control_plane"):
        write(f"control plane: {plane.get('etcd')}; {plane.get('kube-apiserver')}; apiserver flags: "
              f"{' '.join(plane.get('apiserver_flags', []))}")
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
    # Last, so that a CI log's tail (the launchers' logs above are long) still names what went wrong, and where.
    for outcome in ("failed", "error"):
        for test in terminalreporter.stats.get(outcome, []):
            where = f" (in {test.when})" if outcome == "error" else ""
            crash = getattr(test.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(test.longrepr or "")
            write(f"{outcome.upper()}{where}: {test.nodeid}: {' | '.join(message.splitlines()[:3])[:400]}")


@pytest.fixture(scope="session")
def e2e_session() -> Iterator[E2E]:
    if os.geteuid() != 0:
        pytest.fail("the e2e node needs root (containerd, mounts, cgroups, a bridge); run `make e2e` as root")
    with node_session() as session:
        yield session


@pytest.fixture
def suite() -> str:
    """The MPI image a test runs on; a test parametrizes it (OPENMPI) to run on each."""
    return images.BOOKWORM.name


@pytest.fixture
def bare(e2e_session: E2E, suite: str, request: pytest.FixtureRequest) -> Iterator[E2E]:
    """A fresh namespace, deleted afterwards (with its pods), and no operator."""
    with fresh_namespace(e2e_session, request.node.name.removeprefix("test_").replace("_", "-"), suite) as ns:
        yield ns


@pytest.fixture
def e2e(bare: E2E) -> Iterator[E2E]:
    """A fresh namespace with the operator (a real `mpiop run` process) watching only it."""
    with operator_process(bare):
        yield bare


@pytest.fixture
def exec_images_imported(e2e_session: E2E, suite: str) -> tuple[str, str]:
    """(`suite`'s MPI image without OpenSSH, the kubectl image), derived from the MPI image and imported once."""
    return import_exec_images(e2e_session, suite)


@pytest.fixture
def noshell_image(e2e_session: E2E, suite: str) -> str:
    """`suite`'s MPI image without OpenSSH and without /bin/sh, imported once."""
    return import_once(e2e_session, exec_images.mpi_nossh_image(images.MPI_SUITES[suite], exec_images.NO_SHELL))


@pytest.fixture
def restricted(bare: E2E, exec_images_imported: tuple[str, str]) -> Iterator[E2E]:
    """`bare`'s namespace enforcing the restricted Pod Security Standard (testkit.e2e.exec_launch), its operator
    told where kubectl comes from."""
    restrict_namespace(bare)
    with operator_process(bare, "--kubectl-image", exec_images_imported[1]):
        yield bare
