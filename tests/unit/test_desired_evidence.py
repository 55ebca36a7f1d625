"""mpiop.desired.evidence: an attempt's ConfigMap keeps each log's tail within 64 KiB, all within 256 KiB."""

from __future__ import annotations

import pytest

from mpiop.controller.trims import trim_config_map
from mpiop.desired import evidence, objects
from testkit.mpijobs import make_mpijob

JOB = make_mpijob("pi", "ns").obj()


def data_bytes(config_map: dict[str, dict[str, str]]) -> int:
    return sum(len(v.encode()) for v in config_map["data"].values())


def test_small_logs_are_kept_whole_and_the_map_is_the_jobs() -> None:
    made = evidence.config_map(JOB, 0, "MPIJob ns/pi is restarting", [("pi-launcher.main.log", "a\nb\n"),
                                                                      ("pi-worker-1.log", "(not readable: gone)")])
    assert made["data"] == {"failure": "MPIJob ns/pi is restarting", "pi-launcher.main.log": "a\nb\n",
                            "pi-worker-1.log": "(not readable: gone)"}
    meta = made["metadata"]
    assert (meta["name"], meta["namespace"]) == ("pi-attempt-0", "ns")
    assert meta["labels"] == {"training.kubeflow.org/operator-name": "mpi-operator",
                              "training.kubeflow.org/job-name": "pi", "mpiop.kubeflow.org/attempt": "0"}
    assert [(r["kind"], r["name"], r["controller"]) for r in meta["ownerReferences"]] == [("MPIJob", "pi", True)]


def test_a_long_log_keeps_its_last_64_kib_from_a_line_start() -> None:
    log = "".join(f"line {i}\n" for i in range(20000)) + "mpirun noticed that process rank 3 exited"
    kept = evidence.config_map(JOB, 2, "", [("pi-launcher.main.log", log)])["data"]["pi-launcher.main.log"]
    assert len(kept.encode()) <= evidence.LOG_BYTES
    assert kept.endswith("mpirun noticed that process rank 3 exited")
    assert kept.startswith("line ") and log.endswith(kept)


@pytest.mark.parametrize("count", [1, 4, 5, 100])
def test_an_attempts_logs_stay_within_256_kib(count: int) -> None:
    logs = [(f"pi-worker-{i}.main.log", f"worker {i}\n" * 20000) for i in range(count)]
    made = evidence.config_map(JOB, 0, "x" * 10_000, logs)
    assert data_bytes(made) <= evidence.ATTEMPT_BYTES
    assert len(made["data"]["failure"].encode()) <= evidence.SUMMARY_BYTES
    sizes = [len(made["data"][k].encode()) for k, _ in logs]
    assert max(sizes) <= evidence.LOG_BYTES
    assert min(sizes) >= min(evidence.LOG_BYTES, (evidence.ATTEMPT_BYTES - evidence.SUMMARY_BYTES) // count) - 20


def test_multibyte_text_is_cut_on_a_character() -> None:
    kept = evidence.tail_bytes("é" * 100, 51)
    assert kept == "é" * 25


def test_the_operators_cache_keeps_an_attempts_config_map_by_name_only() -> None:
    """Up to 256 KiB each, K per job: the logs never sit in the operator's memory; the hostfile's data does."""
    made = evidence.config_map(JOB, 0, "why", [("pi-launcher.main.log", "x" * 1000)])
    assert trim_config_map(made) == {"metadata": {k: made["metadata"][k] for k in ("name", "namespace", "labels")}
                                     | {"ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                                                             "name": "pi", "uid": JOB.metadata.uid,
                                                             "controller": True}]}}
    hostfile = objects.config_map(JOB, [])
    assert trim_config_map(hostfile)["data"] == hostfile["data"]


def test_the_last_progress_report_is_kept_beside_the_logs() -> None:
    data = evidence.config_map(JOB, 0, "stalled", [("pi-launcher.main.log", "a\n")],
                               progress='{"progressPercentage":40}')["data"]
    assert data == {"failure": "stalled", "progress.json": '{"progressPercentage":40}', "pi-launcher.main.log": "a\n"}
    assert "progress.json" not in evidence.config_map(JOB, 0, "failed", [])["data"]
