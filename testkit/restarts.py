"""The kubelet's view of a container restarted in place (restartPolicy OnFailure) whose n-th run failed, as pod
statuses: `crashed`, then `crash_looping`, then `rerunning` (each counts n failures), or `healed`."""

from __future__ import annotations

from typing import Any


def _container(restarts: int, state: dict[str, Any], failed_before: bool, exit_code: int) -> dict[str, Any]:
    last = {"terminated": {"exitCode": exit_code, "reason": "Error"}} if failed_before else {}
    return {"name": "main", "restartCount": restarts, "state": state, "lastState": last}


def crashed(failures: int, exit_code: int = 1) -> dict[str, Any]:
    """Its `failures`-th run just ended in an error; the kubelet has not restarted it yet."""
    return {"phase": "Running", "containerStatuses": [
        _container(failures - 1, {"terminated": {"exitCode": exit_code, "reason": "Error"}}, failures > 1, exit_code)]}


def crash_looping(failures: int, exit_code: int = 1) -> dict[str, Any]:
    """Its `failures`-th run failed and it waits out the back-off (CrashLoopBackOff)."""
    return {"phase": "Running", "containerStatuses": [
        _container(failures - 1, {"waiting": {"reason": "CrashLoopBackOff"}}, True, exit_code)]}


def rerunning(failures: int, exit_code: int = 1) -> dict[str, Any]:
    """Running again after `failures` failed runs."""
    return {"phase": "Running", "containerStatuses": [
        _container(failures, {"running": {"startedAt": "t"}}, True, exit_code)]}


def healed(failures: int, exit_code: int = 1) -> dict[str, Any]:
    """Succeeded after `failures` failed runs."""
    return {"phase": "Succeeded", "containerStatuses": [
        _container(failures, {"terminated": {"exitCode": 0, "reason": "Completed"}}, True, exit_code)]}
