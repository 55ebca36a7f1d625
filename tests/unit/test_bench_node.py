"""The node phase's reading of what a job's script printed, in each launch mode, its headline figures, and its
jobs' shape and scripts' syntax (the node run itself needs root and the e2e node: `make bench-node`)."""

from __future__ import annotations

import subprocess

import pytest

from bench.node import MILESTONES, exec_job, intervals, printed_milestones, summary, ttfr_job
from mpiop.api.raw import JSON
from mpiop.names import LAUNCH_ANNOTATION
from testkit.e2e.exec_launch import UID

SSH_PRINTED = """\
ttfr launcher 100.50
ttfr dns j-worker-0.j.ns.svc 101.20
ttfr dns j-worker-1.j.ns.svc 101.40
sshd listening
ttfr sshd j-worker-0.j.ns.svc 102.00
ttfr sshd j-worker-1.j.ns.svc 102.60
ttfr mpirun 102.70
ttfr rank 2 103.30
ttfr rank 0 103.10
ttfr rank 3 103.45
ttfr rank 1 103.20
pi is approximately 3.14159
ttfr dns j-worker-1.j.ns.svc 101.10
ttfr sshd j-worker-1.j.ns.svc 102.50
"""
EXEC_PRINTED = """\
ttfr launcher 200.10
ttfr mpirun 200.12
ttfr rank 1 201.05
ttfr rank 0 200.90
ttfr rank 3 201.40
ttfr rank 2 201.30
pi is approximately 3.14159
"""


def test_under_ssh_a_host_counts_when_its_first_observer_saw_it_and_every_host_when_the_last_did() -> None:
    marks = printed_milestones(SSH_PRINTED.splitlines(), "ssh")
    assert marks == {"launcher started": 100.5, "mpirun started": 102.7, "first rank": 103.1, "all ranks": 103.45,
                     "DNS resolvable": 101.2, "sshd accepting": 102.5}


def test_under_exec_the_launcher_mpirun_and_every_rank_are_read_and_no_host_probe_is_needed() -> None:
    marks = printed_milestones(EXEC_PRINTED.splitlines(), "exec")
    assert marks == {"launcher started": 200.1, "mpirun started": 200.12, "first rank": 200.9, "all ranks": 201.4}


def test_the_printed_milestones_and_the_watched_ones_are_each_modes_table() -> None:
    watched = {"pods created", "pods scheduled", "containers started", "Succeeded"}
    assert set(printed_milestones(SSH_PRINTED.splitlines(), "ssh")) | watched == set(MILESTONES["ssh"])
    assert (set(printed_milestones(EXEC_PRINTED.splitlines(), "exec")) | watched | {"workers Running"}
            == set(MILESTONES["exec"]))


def test_a_host_never_seen_accepting_under_ssh_is_an_error_naming_the_job() -> None:
    lines = [line for line in SSH_PRINTED.splitlines() if "sshd j-worker-1" not in line]
    with pytest.raises(AssertionError, match="j: the job's script did not print every milestone"):
        printed_milestones(lines, "ssh", name="j")


@pytest.mark.parametrize("launch", ["ssh", "exec"])
def test_a_rank_that_never_started_is_an_error(launch: str) -> None:
    printed = SSH_PRINTED if launch == "ssh" else EXEC_PRINTED
    lines = [line for line in printed.splitlines() if not line.startswith("ttfr rank 3")]
    with pytest.raises(AssertionError, match="4 ranks, 3 seen"):
        printed_milestones(lines, launch, name="j")


def test_the_summary_is_median_min_and_max_of_each_milestone() -> None:
    runs = [{k: float(i) for k in MILESTONES["exec"]} for i in (3, 1, 2)]
    assert summary(runs, "exec")["all ranks"] == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_the_headline_is_each_runs_interval_then_median_min_and_max() -> None:
    runs = [{"launcher started": 0.6, "mpirun started": 1.4, "all ranks": 2.0},
            {"launcher started": 0.5, "mpirun started": 1.5, "all ranks": 2.5},
            {"launcher started": 0.7, "mpirun started": 1.4, "all ranks": 2.1}]
    assert intervals(runs) == {"launcher started -> all ranks": {"median": 1.4, "min": 1.4, "max": 2.0},
                               "mpirun started -> all ranks": {"median": 0.7, "min": 0.6, "max": 1.0}}


def _command(job: JSON, role: str) -> list[str]:
    command: list[str] = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0].get("command", [])
    return command


def test_the_ssh_launchers_and_workers_scripts_are_valid_bash() -> None:
    job = ttfr_job("j", "ns", "img")
    for role in ("Launcher", "Worker"):
        command = _command(job, role)
        assert command[:2] == ["bash", "-c"], command
        checked = subprocess.run(["bash", "-n", "-c", command[2]], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{role}: {checked.stderr}"
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


def test_the_exec_job_is_the_restricted_shape_with_a_posix_launcher_and_waiting_workers() -> None:
    job = exec_job("j", "nossh")
    assert job["metadata"]["annotations"][LAUNCH_ANNOTATION] == "exec"
    assert job["spec"]["runPolicy"] == {"backoffLimit": 0}
    launcher = _command(job, "Launcher")
    assert launcher[:2] == ["sh", "-c"] and "--allow-run-as-root" not in launcher[2]
    checked = subprocess.run(["sh", "-n", "-c", launcher[2]], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert _command(job, "Worker") == []  # mpiop's default: the workers wait
    for role in ("Launcher", "Worker"):
        pod = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == UID
        assert pod["containers"][0]["image"] == "nossh"
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
