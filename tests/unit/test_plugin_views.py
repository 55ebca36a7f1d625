"""kubectl mpijob status / attempts / logs of a past attempt: what they print of a job that restarted once."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import pytest

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import CleanPodPolicy, FailureInfo, MPIJob, NodeExclusion
from mpiop.plugin.views import (
    SavedLogMissingError,
    attempts_table,
    last_failure,
    missing_pod,
    saved_log,
    status_text,
)
from testkit.mpijobs import T0, make_mpijob

NOW = T0 + dt.timedelta(minutes=5)
SUMMARY = ("MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): pi-worker-1 (ranks 2-3, node n1) container "
           "main Error exit 1; the attempt's logs are kept in ConfigMap pi-attempt-0\nLast lines of pi-launcher:\n...")


def restarted_once(**status: Any) -> JSON:
    builder = (make_mpijob("pi", "ns").workers(2)
               .status(restart_count=1, attempt_start_time=T0 + dt.timedelta(minutes=2), excluded_nodes=["n1"],
                       last_failure=FailureInfo(reason="Error", pod="pi-worker-1", container="main", exit_code=1,
                                                node="n1", ranks="2-3", attempt=0), **status)
               .condition("Created", when=T0)
               .condition("Restarting", "False", reason="MPIJobRunning", message="running", when=T0)
               .condition("Running", when=T0 + dt.timedelta(minutes=3)))
    raw = builder.json()
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return raw


def attempt_config_map(attempt: int, data: dict[str, str]) -> JSON:
    return {"metadata": {"name": f"pi-attempt-{attempt}", "labels": {"mpiop.kubeflow.org/attempt": str(attempt)}},
            "data": data}


def pod(name: str, attempt: int, created: dt.datetime) -> JSON:
    return {"metadata": {"name": name, "labels": {"mpiop.kubeflow.org/attempt": str(attempt)},
                         "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")}}


SAVED = [attempt_config_map(0, {"failure": SUMMARY, "pi-launcher.main.log": "mpirun: lost rank 2\n",
                                "pi-worker-1.main.log": "bye\n"})]


def test_attempts_table_of_a_job_that_restarted_once() -> None:
    pods = [pod("pi-launcher", 0, T0), pod("pi-launcher-1", 1, T0 + dt.timedelta(minutes=2))]
    failure = "pi-worker-1 (ranks 2-3, node n1) container main Error exit 1"
    assert attempts_table(restarted_once(), SAVED, pods, NOW) == (
        f"ATTEMPT   STATE       LAUNCHER        AGE   {'FAILURE'.ljust(len(failure))}   LOGS\n"
        f"0         Restarted   pi-launcher     5m    {failure}   pi-attempt-0\n"
        f"1         Running     pi-launcher-1   3m    {'<none>'.ljust(len(failure))}   <none>\n"
    )


def test_attempts_table_without_the_pods_or_logs() -> None:
    out = attempts_table(restarted_once(), [], [], NOW).splitlines()
    assert out[1].split() == ["0", "Restarted", "<none>", "<none>", "<none>", "<none>"]


def test_status_names_state_attempt_nodes_milestones_and_the_last_failure() -> None:
    out = status_text(restarted_once(), SAVED, NOW)
    assert "State:            Running\n" in out
    assert "Attempt:          1 (restarts 1 of backoffLimit 6)\n" in out
    assert "Attempt started:  3m ago\n" in out
    assert "Excluded nodes:   n1\n" in out
    assert "Progress:         <none> (not reported)\n" in out
    assert ("Milestones:\n"
            "  MILESTONE          AGE   REASON\n"
            "  Created            5m    MPIJobCreated\n"
            "  Restarting=False   5m    MPIJobRunning\n"
            "  Running            2m    MPIJobRunning\n") in out
    assert out.endswith("Last failure:     " + SUMMARY.splitlines()[0] + "\n")


def test_status_shows_reported_progress_whatever_its_shape() -> None:
    """The raw trainerStatus, fields this version does not know (`step`) included, flattened."""
    raw = restarted_once()
    raw["status"]["trainerStatus"] = {"progressPercentage": 40, "step": 120,
                                      "metrics": [{"name": "loss", "value": "0.42"}],
                                      "lastUpdatedTime": "2026-11-26T15:00:00Z"}
    out = status_text(raw, [], NOW)
    assert "Progress:\n  progressPercentage: 40\n  step: 120\n" in out
    assert "lastUpdatedTime: 2026-11-26T15:00:00Z" in out
    assert "loss" in out and "0.42" in out


@pytest.mark.parametrize(("status", "message"), [
    ("True", "MPIJob ns/pi is stopping gracefully (Suspended): launcher pi-launcher was sent SIGTERM; the workers are "
             "deleted once it has ended, or at 2026-11-26T15:01:00Z (stop grace 60s, flag --stop-grace-seconds)"),
    ("False", "MPIJob ns/pi stopped gracefully (Suspended) in 16s: the launcher ended before its workers were deleted"),
])
def test_status_tells_a_graceful_stop_and_how_long_it_took(status: Literal["True", "False"], message: str) -> None:
    raw = restarted_once()
    raw["status"]["conditions"] = [{"type": "Stopping", "status": status, "reason": "Suspended", "message": message,
                                    "lastTransitionTime": "2026-11-26T15:00:00Z"}]
    out = status_text(raw, [], NOW)
    assert f"Graceful stop:    {message}\n" in out
    assert "Graceful stop" not in status_text(restarted_once(), [], NOW)


def test_status_escapes_what_a_terminal_would_act_on() -> None:
    """A job's pods write its trainerStatus (an older mpiop took any characters): an escape sequence or a
    bidirectional override is shown escaped, not handed to the terminal of whoever runs `kubectl mpijob status`."""
    raw = restarted_once()
    raw["status"]["trainerStatus"] = {"progressPercentage": 40, "\x1b]0;pwned\x07": "x",
                                      "note": "done\u202e\x1b[2J\nFAKE: line",
                                      "metrics": [{"name": "loss\x1b[31m", "value": "0.42"}]}
    out = status_text(raw, [], NOW)
    assert not any(c in out for c in "\x1b\x07\u202e")
    assert "  \\x1b]0;pwned\\x07: x\n" in out
    assert "  note: done\\u202e\\x1b[2J\\nFAKE: line\n" in out
    assert "loss\\x1b[31m" in out


@pytest.mark.parametrize(("saved", "expected"), [
    (SAVED, SUMMARY.splitlines()[0]),  # the attempt's saved report
    ([], "attempt 0 pi-worker-1 ranks 2-3 node n1 container main Error exit 1"),  # only status.lastFailure
])
def test_last_failure_in_one_paragraph(saved: list[JSON], expected: str) -> None:
    assert last_failure(MPIJob.model_validate(restarted_once()), saved) == expected


def test_a_past_attempts_log_from_its_config_map() -> None:
    assert saved_log(SAVED[0], "pi-launcher", None) == ("pi-launcher.main.log", "mpirun: lost rank 2\n")
    assert saved_log(SAVED[0], "pi-worker-1", "main") == ("pi-worker-1.main.log", "bye\n")
    with pytest.raises(SavedLogMissingError, match="pi-attempt-0 has no log of pi-worker-0: it keeps the launcher's "
                       r"and the failed pods' \(pi-launcher.main.log, pi-worker-1.main.log\)"):
        saved_log(SAVED[0], "pi-worker-0", None)


def finished(policy: CleanPodPolicy | None, outcome: Literal["Succeeded", "Failed"] = "Succeeded") -> MPIJob:
    """Job pi of `make run` after its one attempt: Created, Running, then `outcome`."""
    builder = make_mpijob("pi", "default").workers(2).condition("Created").condition("Running").condition(outcome)
    if policy is not None:
        builder = builder.clean_pod_policy(policy)
    return builder.obj()


CLEANED = 'pod "pi-worker-1" of mpijob pi not found in namespace "default" (attempt 0): the job Succeeded, and '
LAUNCHER_LOG = "mpirun gathers every rank's output into the launcher's log"


@pytest.mark.parametrize(
    ("job", "pod", "launcher_kept", "saved", "message"),
    [
        # `make run`'s pi, `--rank 3`: the workers went when the job finished; the launcher is kept.
        (finished(None), "pi-worker-1", True, None,
         f"{CLEANED}cleanPodPolicy Running deleted its pods still running. {LAUNCHER_LOG}: "
         "kubectl mpijob logs pi -n default --launcher"),
        # A failed attempt: its launcher's log saved in its ConfigMap, where `--launcher` reads it.
        (finished("Running", "Failed"), "pi-worker-0", False,
         attempt_config_map(0, {"failure": SUMMARY, "pi-launcher.main.log": "x\n", "pi-worker-1.main.log": "y\n"}),
         'pod "pi-worker-0" of mpijob pi not found in namespace "default" (attempt 0): the job Failed, and '
         f"cleanPodPolicy Running deleted its pods still running. {LAUNCHER_LOG}, saved in ConfigMap pi-attempt-0: "
         "kubectl mpijob logs pi -n default --launcher"),
        (finished("All"), "pi-worker-1", False, None,
         f"{CLEANED}cleanPodPolicy All deleted every pod. The launcher's log, where mpirun gathers every rank's "
         "output, went with its pod"),
        (finished("All"), "pi-launcher", False, None, f"{CLEANED}cleanPodPolicy All deleted every pod".replace(
            "pi-worker-1", "pi-launcher")),
        # A running job whose pod is not there (yet): only that, and where its ranks' output goes.
        (make_mpijob("pi", "default").condition("Created").obj(), "pi-worker-1", True, None,
         f'pod "pi-worker-1" of mpijob pi not found in namespace "default" (attempt 0). {LAUNCHER_LOG}: '
         "kubectl mpijob logs pi -n default --launcher"),
    ],
    ids=["succeeded-workers-cleaned", "failed-launcher-saved", "all-cleaned", "all-cleaned-launcher", "running"],
)
def test_a_missing_pod_says_why_and_where_its_ranks_output_is(job: MPIJob, pod: str, launcher_kept: bool,
                                                              saved: JSON | None, message: str) -> None:
    shown = missing_pod(job, pod, 0, launcher_kept=launcher_kept, saved=saved)
    print(shown)
    assert shown == message


def test_status_says_why_each_node_is_excluded_escaping_what_a_pod_could_write() -> None:
    told = ("pi-worker-1 failed there (DisruptionTarget DeletionByDeviceTaintManager: device gpu-3 of driver "
            "gpu.example.com tainted example.com/unhealthy=t\x1b[2J:NoExecute)")
    out = status_text(restarted_once(node_exclusions=[NodeExclusion(node="n1", message=told, attempt=0)]), SAVED, NOW)
    assert ("Excluded nodes:   n1\n  n1: pi-worker-1 failed there (DisruptionTarget DeletionByDeviceTaintManager: "
            "device gpu-3 of driver gpu.example.com tainted example.com/unhealthy=t\\x1b[2J:NoExecute)\n") in out
