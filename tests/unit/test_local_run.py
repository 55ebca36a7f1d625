"""`make run`'s choices: when the real node is used, when the pi job counts as finished, and what it tells the
user to type next."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from devcluster import local_run
from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.v2beta1 import LAUNCHER, WORKER, MPIJob


def cond(type_: str, status: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": f"MPIJob{type_}"}


@pytest.mark.parametrize(("status", "expected"), [
    ({}, None),
    ({"conditions": [cond("Created", "True"), cond("Running", "True")]}, None),
    ({"conditions": [cond("Created", "True"), cond("Succeeded", "True")]}, "Succeeded"),
    ({"conditions": [cond("Running", "False"), cond("Failed", "True")]}, "Failed"),
    ({"conditions": [cond("Succeeded", "False")]}, None),
], ids=["no-status", "running", "succeeded", "failed", "false-is-not-finished"])
def test_final_condition(status: dict[str, Any], expected: str | None) -> None:
    found = local_run.final_condition({"status": status})
    assert (found.type if found is not None else None) == expected


def test_node_is_skipped_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIOP_RUN_NODE", "0")
    assert local_run.node_possible() is False


def test_node_needs_its_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIOP_RUN_NODE", "1")
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "containerd" else f"/usr/bin/{tool}")
    assert local_run.node_possible() is False


ROOT = Path(__file__).resolve().parents[2]


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("local", [True, False], ids=["local-control-plane", "kubeconfig"])
def test_the_next_steps_name_only_commands_and_files_that_exist(local: bool) -> None:
    shown = local_run.next_steps("v1.34.4", "/k/config", "/bin/kubectl", local=local)
    assert ("make dev-cluster-down" in shown) is local
    assert "mpiop dev-cluster" not in shown
    assert set(re.findall(r"\bmake ([\w-]+)", shown)) <= make_targets()
    assert all((ROOT / path).is_file() for path in re.findall(r"-f (\S+)", shown))


def test_the_pi_job_runs_the_chosen_mpis_pi_over_all_ranks_on_the_local_image() -> None:
    job = MPIJob.model_validate(pi_job("pi", "local/mpi:1", implementation="MPICH", workers=3, slots=2,
                                       run_as_user=1000, worker_readiness_probe=True,
                                       runPolicy={"backoffLimit": 1}))
    launcher, worker = (job.spec.mpi_replica_specs[r].template["spec"] for r in (LAUNCHER, WORKER))
    assert job.spec.slots_per_worker == 2 and job.spec.mpi_implementation == "MPICH"
    assert job.spec.mpi_replica_specs[WORKER].replicas == 3 and job.spec.run_policy.backoff_limit == 1
    assert launcher["containers"][0]["command"] == ["mpi-wait-hosts", "mpirun.mpich", "-n", "6",
                                                    "/usr/local/bin/pi-mpich", SAMPLES]
    assert worker["containers"][0]["command"] == ["/usr/local/bin/mpi-sshd"]
    assert "readinessProbe" in worker["containers"][0]
    for spec in (launcher, worker):
        assert spec["securityContext"] == {"runAsUser": 1000}
        assert spec["containers"][0]["image"] == "local/mpi:1"
        assert spec["containers"][0]["imagePullPolicy"] == "Never"
