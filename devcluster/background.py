"""`python -m devcluster up|status|down`: the test control plane, kept running in the background for humans.

`up` starts a detached supervisor process (this module's `supervise`) that owns the control plane; the
components die with the supervisor, and `down` asks the supervisor to stop them and waits until every
process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from devcluster.binaries import cache_dir
from devcluster.controlplane import ControlPlane


def state_dir() -> Path:
    return cache_dir() / "dev-cluster"


def _state_file() -> Path:
    return state_dir() / "state.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is not alive for our purposes.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def read_state() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    return state


def supervise(scheduler: bool) -> int:
    """Entry point of the detached supervisor: start, publish state, wait for SIGTERM, stop."""
    directory = state_dir()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    plane = ControlPlane(workdir=directory / "cluster", scheduler=scheduler, tie_to_parent=True)
    try:
        plane.start()
    except Exception as error:  # reported to `up` through the state file
        (directory / "failed").write_text(str(error))
        return 1
    state = {
        "supervisor": os.getpid(),
        "kubeconfig": str(plane.kubeconfig),
        "server": plane.server,
        "pids": plane.pids(),
        "components": [c.name for c in plane.components],
    }
    _state_file().write_text(json.dumps(state))
    try:
        while not stop.wait(1.0):
            if any(not c.running() for c in plane.components):
                dead = [c.name for c in plane.components if not c.running()]
                (directory / "failed").write_text(f"component exited: {', '.join(dead)}")
                break
    finally:
        plane.stop()
        _state_file().unlink(missing_ok=True)
    return 0


def up(scheduler: bool = True, timeout: float = 1800.0) -> int:
    state = read_state()
    if state and _alive(state["supervisor"]):
        print(f"dev cluster already running at {state['server']}")
        print(f"export KUBECONFIG={state['kubeconfig']}")
        return 0
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "failed").unlink(missing_ok=True)
    _state_file().unlink(missing_ok=True)
    log = (directory / "supervisor.log").open("ab")
    argv = [sys.executable, "-m", "devcluster.background"]
    argv += ["--scheduler"] if scheduler else []
    # devcluster is not installed (it is not part of the product): the child finds it beside this checkout.
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
    )
    print(f"starting the control plane (log: {directory / 'supervisor.log'}) ...", file=sys.stderr)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (state := read_state()) is not None:
            print(f"dev cluster up: {state['server']} ({', '.join(state['components'])})")
            print(f"export KUBECONFIG={state['kubeconfig']}")
            return 0
        if process.poll() is not None or (directory / "failed").exists():
            reason = (directory / "failed").read_text() if (directory / "failed").exists() else ""
            print(f"dev cluster failed to start: {reason}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    process.terminate()
    print("dev cluster did not become ready in time", file=sys.stderr)
    return 1


def status() -> int:
    state = read_state()
    if not state or not _alive(state["supervisor"]):
        print("dev cluster: not running")
        return 1
    alive = [(name, pid, _alive(pid)) for name, pid in zip(state["components"], state["pids"], strict=True)]
    print(f"dev cluster: running at {state['server']} (supervisor pid {state['supervisor']})")
    for name, pid, ok in alive:
        print(f"  {name:<24} pid {pid:<8} {'running' if ok else 'DEAD'}")
    print(f"export KUBECONFIG={state['kubeconfig']}")
    return 0 if all(ok for *_, ok in alive) else 1


def down(timeout: float = 60.0) -> int:
    state = read_state()
    if not state:
        print("dev cluster: not running")
        return 0
    pids = [state["supervisor"], *state["pids"]]
    with contextlib.suppress(ProcessLookupError):
        os.kill(state["supervisor"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _state_file().unlink(missing_ok=True)
    left = [p for p in pids if _alive(p)]
    print("dev cluster: stopped" + (f" (still alive: {left})" if left else ", no process left"))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(supervise(scheduler="--scheduler" in sys.argv[1:]))
