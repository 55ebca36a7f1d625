"""`mpiop run` as a process: /metrics moves with a job's life, probes answer, logs are JSON lines that
name the job and the reconcile, and SIGTERM ends it cleanly."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devcluster.controlplane import ControlPlane
from testkit.deploy import metric_names, queries
from testkit.metrics import Metrics
from testkit.operator import Cluster, drive_to_success, eventually, mpijob, start_pods
from testkit.process import OperatorProcess


def exported_families(text: str) -> set[str]:
    """Every series name /metrics can show: each family's, with its histogram and counter suffixes."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
        names |= {family.name, *(family.name + s for s in suffixes.get(family.type, ()))}
    return names


async def _fail(cluster: Cluster, name: str) -> None:
    """backoffLimit 1: the worker OOM-killed (a restart), then the next attempt's launcher fails (Failed)."""
    await start_pods(cluster, name, 1)
    await cluster.set_phase(f"{name}-worker-0", "Failed", exit_code=137, reason="OOMKilled")
    await eventually(lambda: cluster.condition(name, "Restarting"), what=f"{name} Restarting")
    await eventually(lambda: cluster.pod(f"{name}-launcher-1"), what="the next attempt's launcher")
    await cluster.set_phase(f"{name}-launcher-1", "Failed", exit_code=1)
    await eventually(lambda: cluster.condition(name, "Failed"), what=f"{name} Failed")


def _moved(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


async def test_metrics_move_with_a_job_life(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    op = OperatorProcess.in_namespace(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path, "--log-level=debug",
                               "--leader-elect", f"--leader-elect-namespace={cluster.ns}")
    try:
        await eventually(op.ready, timeout=60, what="/readyz")
        await eventually(op.is_leader, timeout=30, what="leading")
        assert (await op.http(op.health_port, "/healthz"))[0] == 200
        before = await op.metrics()

        await cluster.create_job(mpijob("ok", workers=1))
        await cluster.create_job(mpijob("bad", workers=1, run_policy={"backoffLimit": 1}))
        await drive_to_success(cluster, "ok")
        await _fail(cluster, "bad")
        after = await eventually(lambda: _settled(op), what="per-job gauges")

        # kubeflow/mpi-operator's names, as existing dashboards query them.
        assert _moved(before, after, "mpi_operator_jobs_created_total") == 2
        assert _moved(before, after, "mpi_operator_jobs_successful_total") == 1
        assert _moved(before, after, "mpi_operator_jobs_failed_total") == 1
        assert after.value("mpi_operator_job_info", launcher="ok-launcher", namespace=cluster.ns) == 1
        assert after.value("mpi_operator_is_leader") == 1
        # Histograms and mpiop's own.
        assert _moved(before, after, "mpiop_reconcile_duration_seconds_count", result="ok") >= 4
        assert _moved(before, after, "mpiop_reconcile_duration_seconds_bucket", result="ok", le="+Inf") >= 4
        assert _moved(before, after, "mpiop_workqueue_wait_seconds_count") >= 4
        # ok: launcher + worker; bad: twice (one restart).
        assert _moved(before, after, "mpiop_api_requests_total", verb="POST", resource="pods", code="201") == 6
        assert _moved(before, after, "mpiop_api_requests_total", verb="PATCH", resource="mpijobs/status") >= 4
        assert _moved(before, after, "mpiop_api_requests_total", verb="DELETE", resource="pods") >= 1
        assert _moved(before, after, "mpiop_api_request_duration_seconds_count", verb="POST", resource="pods") == 6
        assert after.value("mpiop_jobs", phase="Succeeded") == 1 and after.value("mpiop_jobs", phase="Failed") == 1
        assert after.value("mpiop_workqueue_depth") == 0
        # Job durations by final state, the scheduling delay, restarts by reason.
        assert _moved(before, after, "mpiop_job_duration_seconds_count", state="Succeeded") == 1
        assert _moved(before, after, "mpiop_job_duration_seconds_count", state="Failed") == 1
        assert _moved(before, after, "mpiop_job_scheduling_delay_seconds_count") == 2  # both ran once
        assert _moved(before, after, "mpiop_jobs_restarted_total", reason="OOMKilled") == 1
        # The failure report read the failed launcher's log (no kubelet here: the apiserver answers an error).
        assert _moved(before, after, "mpiop_api_requests_total", verb="GET", resource="pods/log") >= 1
        # The shipped dashboard and alerts query only what mpiop exports.
        exported = exported_families((await op.http(op.metrics_port, "/metrics"))[1])
        for expr in queries():
            missing = {n for n in metric_names(expr) if n not in exported}
            assert not missing, f"{expr!r} uses metrics mpiop does not export: {missing}"

        assert op.stop() == 0
        lines = [json.loads(line) for line in op.log_lines()]  # every line is one JSON object
        reconciles = [line for line in lines if "reconcile_id" in line]
        assert any(line["event"] == "reconciled" and line["job"] == f"{cluster.ns}/ok" for line in reconciles)
        assert all(line["job"].startswith(f"{cluster.ns}/") for line in reconciles)
        assert {"timestamp", "level", "event"} <= set(lines[-1]) and lines[-1]["event"] == "mpiop stopped"
    except BaseException:
        print(f"--- mpiop (exit {op.process and op.process.poll()})", *op.log_lines()[-25:], sep="\n")
        raise
    finally:
        op.kill()


async def _settled(op: OperatorProcess) -> Metrics | None:
    metrics = await op.metrics()
    done = metrics.value("mpiop_jobs", phase="Succeeded") == 1 and metrics.value("mpiop_jobs", phase="Failed") == 1
    return metrics if done and metrics.value("mpiop_workqueue_depth") == 0 else None
