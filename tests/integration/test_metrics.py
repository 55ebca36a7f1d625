"""`mpiop run` as a process: /metrics moves with a job's life, probes answer, logs are JSON lines that
name the job and the reconcile, and SIGTERM ends it cleanly."""

from __future__ import annotations

import json
from pathlib import Path

from devcluster.controlplane import ControlPlane
from tests.integration.operator import Cluster, eventually, mpijob
from tests.integration.test_leader import Metrics, OperatorProcess, drive_to_success


async def _fail(cluster: Cluster, name: str) -> None:
    wanted = {f"{name}-launcher", f"{name}-worker-0"}

    async def pods_exist() -> bool:
        return wanted <= set(await cluster.pods())

    await eventually(pods_exist, what=f"pods of {name}")
    await cluster.run_all(sorted(wanted))
    await cluster.set_phase(f"{name}-launcher", "Failed", exit_code=1)
    await eventually(lambda: cluster.condition(name, "Failed"), what=f"{name} Failed")


def _moved(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


async def test_metrics_move_with_a_job_life(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    op = OperatorProcess.start(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path, "--log-level=debug",
                               "--leader-elect", f"--leader-elect-namespace={cluster.ns}")
    try:
        await eventually(op.ready, timeout=60, what="/readyz")
        await eventually(op.is_leader, timeout=30, what="leading")
        assert (await op.http(op.health_port, "/healthz"))[0] == 200
        before = await op.metrics()

        await cluster.create_job(mpijob("ok", workers=1))
        await cluster.create_job(mpijob("bad", workers=1, run_policy={"backoffLimit": 0}))
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
        assert _moved(before, after, "mpiop_api_requests_total", verb="POST", resource="pods", code="201") == 4
        assert _moved(before, after, "mpiop_api_requests_total", verb="PATCH", resource="mpijobs/status") >= 4
        assert _moved(before, after, "mpiop_api_requests_total", verb="DELETE", resource="pods") >= 1
        assert _moved(before, after, "mpiop_api_request_duration_seconds_count", verb="POST", resource="pods") == 4
        assert after.value("mpiop_jobs", phase="Succeeded") == 1 and after.value("mpiop_jobs", phase="Failed") == 1
        assert after.value("mpiop_workqueue_depth") == 0

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
