"""The node phase's reading of what a job's script printed, and its scripts' syntax (the node run itself needs
root and the e2e node: `make bench-node`)."""

from __future__ import annotations

import subprocess

import pytest

from bench.node import MILESTONES, printed_milestones, summary, ttfr_job

PRINTED = """\
ttfr launcher 100.50
ttfr dns j-worker-0.j.ns.svc 101.20
ttfr dns j-worker-1.j.ns.svc 101.40
sshd listening
ttfr sshd j-worker-0.j.ns.svc 102.00
ttfr sshd j-worker-1.j.ns.svc 102.60
ttfr mpirun 102.70
ttfr rank 2 103.30
ttfr rank 0 103.10
pi is approximately 3.14159
ttfr dns j-worker-1.j.ns.svc 101.10
ttfr sshd j-worker-1.j.ns.svc 102.50
"""


def test_a_host_counts_when_its_first_observer_saw_it_and_every_host_when_the_last_did() -> None:
    marks = printed_milestones(PRINTED.splitlines(), workers=2)
    assert marks == {"launcher started": 100.5, "mpirun started": 102.7, "first rank": 103.1,
                     "DNS resolvable": 101.2, "sshd accepting": 102.5}


def test_a_host_never_seen_accepting_is_an_error_naming_the_job() -> None:
    lines = [line for line in PRINTED.splitlines() if "sshd j-worker-1" not in line]
    with pytest.raises(AssertionError, match="j: the job's script did not print every milestone"):
        printed_milestones(lines, workers=2, name="j")


def test_the_summary_is_median_min_and_max_of_each_milestone() -> None:
    runs = [{k: float(i) for k in MILESTONES} for i in (3, 1, 2)]
    assert summary(runs)["first rank"] == {"median": 2.0, "min": 1.0, "max": 3.0}


def test_the_launchers_and_workers_scripts_are_valid_bash() -> None:
    job = ttfr_job("j", "ns", "img")
    replicas = job["spec"]["mpiReplicaSpecs"]
    for role in ("Launcher", "Worker"):
        command = replicas[role]["template"]["spec"]["containers"][0]["command"]
        assert command[:2] == ["bash", "-c"], command
        checked = subprocess.run(["bash", "-n", "-c", command[2]], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{role}: {checked.stderr}"
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
