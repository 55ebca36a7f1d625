"""The e2e session: one real node (devcluster/node.py) with the MPI image, the CRD, and per test a
fresh namespace and the operator (`mpiop run --namespace <ns>`, a real process) watching it.

A test runs on bookworm's MPI image (Open MPI 4.1) unless it parametrizes `suite` (e.g. with
testkit.e2e.session.OPENMPI): the trixie image (Open MPI 5 on PRRTE) is built and imported the first time a
test asks for it. Open MPI 5's scenarios are selectable with `-k openmpi5`, MPICH on trixie with `-k trixie`.

Timings go to `.cache/e2e/report.json` and the terminal summary: node bring-up, and for each scenario the
seconds from creating the MPIJob to its final condition.

Under pytest-xdist (`make e2e`: `-n 2 --dist loadgroup`) the workers share one node: the controller brings it up
in pytest_configure and stops it in pytest_unconfigure, each worker's `e2e_session` attaches to it
(testkit.e2e.session.attach_node), scenarios marked `node_wide` run alone on it (testkit.e2e.nodelock), and each
worker's REPORT reaches the controller when the worker ends (its `workeroutput`), merged there. With `-n 0` (or
without xdist) the one process brings the node up in `e2e_session`, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import exec_images, images
from testkit.e2e.exec_launch import import_exec_images, import_once, restrict_namespace
from testkit.e2e.nodelock import node_lock
from testkit.e2e.session import (
    E2E,
    REPORT,
    REPORT_PATH,
    attach_node,
    fresh_namespace,
    merge_report,
    node_session,
    operator_process,
    share_node,
)

SHARED_KEY = "mpiop_e2e_node"  # workerinput: the controller's shared node (share_node's file)
REPORT_KEY = "mpiop_e2e_report"  # workeroutput: the worker's REPORT, as JSON
_NODE = pytest.StashKey[contextlib.ExitStack]()
_SHARED = pytest.StashKey[str]()


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _shared(config: pytest.Config) -> str | None:
    """On an xdist worker, the file of the node the controller shares."""
    shared: str | None = getattr(config, "workerinput", {}).get(SHARED_KEY)
    return shared


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "node_wide: changes what every namespace on the node sees, or its timing "
                                       "bounds would not hold beside another scenario: runs alone on the node")
    # The xdist controller (workers to come, none yet): the one node, up before the workers start.
    if _worker(config) or not getattr(config.option, "numprocesses", None) or config.option.collectonly:
        return
    if os.geteuid() != 0:
        return  # each worker's e2e_session fails, saying why
    stack = contextlib.ExitStack()
    config.stash[_NODE] = stack
    config.stash[_SHARED] = str(share_node(stack.enter_context(node_session())))


def pytest_unconfigure(config: pytest.Config) -> None:
    if (stack := config.stash.get(_NODE, None)) is not None:
        stack.close()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """The controller tells each xdist worker where the shared node's record is."""
    if (shared := node.config.stash.get(_SHARED, None)) is not None:
        node.workerinput[SHARED_KEY] = shared


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A worker ended: its REPORT (timings, launcher logs) into the controller's."""
    if report := getattr(node, "workeroutput", {}).get(REPORT_KEY):
        merge_report(REPORT, json.loads(report))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _worker(session.config):
        session.config.workeroutput[REPORT_KEY] = json.dumps(REPORT)  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """On a worker sharing the node: a `node_wide` scenario (setup and teardown included) alone on the node, any
    other beside other shared ones."""
    shared = _shared(item.config)
    if shared is None:
        return (yield)
    with node_lock(Path(shared).parent, exclusive=item.get_closest_marker("node_wide") is not None) as waited:
        if waited >= 1:
            REPORT.setdefault("node_lock_waits", {})[item.nodeid] = round(waited, 1)
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The first test also pays for the node (and, on a fresh machine, for building it): a longer bound.
    for item in items:
        item.add_marker(pytest.mark.timeout(900))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _worker(terminalreporter.config):  # the controller prints (and writes) the merged report
        return
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
    if waits := REPORT.get("node_lock_waits"):  # xdist workers sharing the node: who waited for whom, how long
        each = ", ".join(f"{test.rsplit('::', 1)[-1]} {seconds:.1f}s" for test, seconds in waits.items())
        write(f"waited for the node-wide lock: {sum(waits.values()):.1f}s in all ({each})")
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
def e2e_session(request: pytest.FixtureRequest) -> Iterator[E2E]:
    if os.geteuid() != 0:
        pytest.fail("the e2e node needs root (containerd, mounts, cgroups, a bridge); run `make e2e` as root")
    if (shared := _shared(request.config)) is not None:
        yield attach_node(Path(shared))  # the controller's node: it stops it
    elif _worker(request.config):
        pytest.fail("an xdist worker without the controller's node (did its pytest_configure start none?)")
    else:
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
