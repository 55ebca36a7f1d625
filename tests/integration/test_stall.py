"""A job silent past its progress deadline, through the real apiserver: restarted with reason Stalled, every rank's
entry and the last report in `<job>-attempt-0`, then Failed Stalled past backoffLimit.

No kubelet runs here (the tests play it), so the logs are recorded as not readable; e2e/test_stall.py reads them
on the real node. The job's report is written the way mpiop's status endpoint writes it (status.trainerStatus).
"""

from __future__ import annotations

import datetime as dt
import json

from mpiop.kube.client import CONFIGMAPS, MPIJOBS
from testkit.operator import Cluster, Operator, eventually, mpijob, start_pods

ANNOTATION = "mpiop.kubeflow.org/progress-deadline-seconds"


async def test_a_silent_job_restarts_then_fails_stalled(cluster: Cluster, operator: Operator) -> None:
    manifest = mpijob("st", workers=2, run_policy={"backoffLimit": 1})
    manifest["metadata"]["annotations"] = {ANNOTATION: "3"}
    await cluster.create_job(manifest)
    await start_pods(cluster, "st", 2)
    reported = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = {"progressPercentage": 50, "estimatedRemainingSeconds": 60,
              "metrics": [{"name": "loss", "value": "0.25"}], "lastUpdatedTime": reported}
    await cluster.kube.patch(MPIJOBS, cluster.ns, "st", {"status": {"trainerStatus": report}}, subresource="status")

    restarting = await eventually(lambda: cluster.condition("st", "Restarting"), what="restarted as Stalled")
    job = await cluster.job("st")
    assert job is not None
    assert job["status"]["lastFailure"]["reason"] == "Stalled"
    assert f"it last reported at {reported}: 50% done, about 60s left, loss=0.25" in restarting["message"]
    assert "(progress deadline 3s, annotation mpiop.kubeflow.org/progress-deadline-seconds)" in restarting["message"]
    assert job["status"]["trainerStatus"] == report, "the last report is kept through the restart"
    saved = await cluster.kube.get(CONFIGMAPS, cluster.ns, "st-attempt-0")
    assert json.loads(saved["data"]["progress.json"]) == report
    logged = sorted(k.split(".")[0] for k in saved["data"] if k.endswith(".log"))
    assert logged == ["st-launcher", "st-worker-0", "st-worker-1"], "every rank's pod, not only a blamed one"

    await start_pods(cluster, "st", 2, launcher="st-launcher-1", running=False)  # it stalls: Running is brief
    failed = await eventually(lambda: cluster.condition("st", "Failed"), what="Failed past backoffLimit 1")
    assert failed["reason"] == "Stalled"
    assert "this attempt never reported progress" in failed["message"]
    print("restarted:", restarting["message"].splitlines()[0])
    print("failed:", failed["message"].splitlines()[0])
