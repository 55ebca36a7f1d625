"""What lets xdist workers share the e2e node (e2e/conftest.py): the node-wide readers-writer lock, a node attached
from its record, and the workers' reports merged into the controller's."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from devcluster.node import Node, NodeError
from testkit.e2e.nodelock import node_lock
from testkit.e2e.session import merge_report


def _hold(directory: Path, exclusive: bool, events: list[str], name: str, hold: threading.Event) -> threading.Thread:
    """A thread that takes the lock, records `name` in `events`, and holds it until `hold` is set."""
    def run() -> None:
        with node_lock(directory, exclusive):
            events.append(name)
            hold.wait(10)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until(condition: object, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_shared_holders_run_side_by_side(tmp_path: Path) -> None:
    events: list[str] = []
    release = threading.Event()
    threads = [_hold(tmp_path, False, events, name, release) for name in ("a", "b")]
    _until(lambda: len(events) == 2)
    assert sorted(events) == ["a", "b"]  # both in at once
    release.set()
    for thread in threads:
        thread.join(5)


def test_an_exclusive_holder_waits_for_shared_ones_and_is_not_overtaken(tmp_path: Path) -> None:
    """flock locks belong to open file descriptions: threads with their own open()s contend as processes do."""
    events: list[str] = []
    first, writer, late = threading.Event(), threading.Event(), threading.Event()
    threads = [_hold(tmp_path, False, events, "reader", first)]
    _until(lambda: events == ["reader"])
    threads.append(_hold(tmp_path, True, events, "writer", writer))
    time.sleep(0.2)  # the writer waits at the gate's far side for the reader to go
    threads.append(_hold(tmp_path, False, events, "late reader", late))
    time.sleep(0.2)
    assert events == ["reader"], "the writer does not overlap a reader, and no later reader overtakes it"
    first.set()
    _until(lambda: len(events) == 2)
    time.sleep(0.2)
    assert events == ["reader", "writer"], "the writer alone"
    writer.set()
    _until(lambda: len(events) == 3)
    late.set()
    for thread in threads:
        thread.join(5)
    assert events == ["reader", "writer", "late reader"]


def test_an_attached_node_is_the_record_of_a_running_one_and_stops_nothing(tmp_path: Path) -> None:
    record = {"workdir": str(tmp_path), "control_plane": str(tmp_path / "control-plane"), "api_port": 6443,
              "server": "https://127.0.0.1:6443", "kubeconfig": str(tmp_path / "control-plane" / "kubeconfig"),
              "ca": str(tmp_path / "control-plane" / "pki" / "ca.crt"), "keep_images": True}
    node = Node.attach(json.loads(json.dumps(record)))
    assert node.attached and node.workdir == tmp_path
    assert node.control_plane is not None and node.control_plane.server == record["server"]
    assert str(node.kubeconfig) == record["kubeconfig"]
    assert node.attach_record() == record
    node.stop()  # nothing to stop: the owner's
    with pytest.raises(NodeError, match="another process"):
        node.start()


def test_a_workers_report_merges_into_the_controllers() -> None:
    controller = {"node": {"total": 30.0}, "scenarios": {"a": 1.0}, "host_network": {"x": [1]}}
    merge_report(controller, {"node": {"import trixie": 4.0}, "scenarios": {"b": 2.0}, "host_network": {"y": [2]},
                              "pi_launcher_log": "log"})
    assert controller == {"node": {"total": 30.0, "import trixie": 4.0}, "scenarios": {"a": 1.0, "b": 2.0},
                          "host_network": {"x": [1], "y": [2]}, "pi_launcher_log": "log"}
