"""What one 8-worker job costs the apiserver over its whole life, by the operator's own count.

`mpiop run` runs as a process; its `mpiop_api_requests_total` (/metrics) is read before the job is made and
once the job has succeeded, its workers are gone and the operator has been quiet for a while (Events are
sent in the background, so they are waited for too). The test fails above the budget and prints the
requests by verb and resource. It runs twice: with kubeflow's defaults, and with the two opt-outs
(--no-lifecycle-events --no-discover-hosts) that take an operator to the issue-18 target of 16.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from tests.integration.operator import Cluster, eventually, mpijob
from tests.integration.test_leader import Metrics, OperatorProcess

WORKERS = 8
# 12 creations (Secret, ConfigMap, Service, launcher, 8 workers), 3 status writes (Created, Running,
# Succeeded: the replica counts ride along), the finished workers deleted in one DELETE collection (by the
# job's labels and phase, listed from the apiserver's watch cache), the hostfile's discover_hosts.sh (it lists
# the Running workers, kubeflow's contract for elastic Horovod) patched once when they run, and one Event per
# transition (Created, Running, Succeeded, as kubeflow records them). It cost 42 before issue 18, 27 with
# one DELETE per worker.
BUDGET = 12 + 3 + 1 + 1 + 3
# Without the three lifecycle Events (only logged) and with a discover_hosts.sh that never changes.
LEAN = ("--no-lifecycle-events", "--no-discover-hosts")
LEAN_BUDGET = 12 + 3 + 1


def requests(metrics: Metrics) -> Counter[str]:
    counts: Counter[str] = Counter()
    for sample in metrics.samples:
        if sample.name == "mpiop_api_requests_total":
            counts[f"{sample.labels['verb']} {sample.labels['resource']}"] += int(sample.value)
    return counts


async def quiet(op: OperatorProcess, seconds: float = 3.0, timeout: float = 60.0) -> Metrics:
    """The operator's metrics once its request counts have not moved for `seconds`."""
    deadline = time.monotonic() + timeout
    last = await op.metrics()
    since = time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = await op.metrics()
        if requests(now) != requests(last):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return now
    raise AssertionError(f"the operator was still sending requests after {timeout}s")


@pytest.mark.parametrize(("flags", "budget"), [((), BUDGET), (LEAN, LEAN_BUDGET)], ids=["kubeflow-defaults", "lean"])
async def test_one_job_life_stays_within_the_request_budget(control_plane: ControlPlane, cluster: Cluster,
                                                            tmp_path: Path, flags: tuple[str, ...],
                                                            budget: int) -> None:
    op = OperatorProcess.start(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path, *flags)
    try:
        await eventually(op.ready, timeout=60, what="/readyz")
        before = await quiet(op)
        name = "life"
        pods = [f"{name}-launcher", *(f"{name}-worker-{i}" for i in range(WORKERS))]

        async def pods_are(wanted: set[str]) -> bool:
            return set(await cluster.pods()) == wanted

        await cluster.create_job(mpijob(name, workers=WORKERS))
        await eventually(lambda: pods_are(set(pods)), what="every pod")
        started = time.monotonic()
        await cluster.run_all(pods)
        print(f"\nevery pod Running and Ready in {time.monotonic() - started:.2f}s")
        await eventually(lambda: cluster.condition(name, "Running"), what="Running")
        await cluster.set_phase(f"{name}-launcher", "Succeeded")
        await eventually(lambda: cluster.condition(name, "Succeeded"), what="Succeeded")
        await eventually(lambda: pods_are({f"{name}-launcher"}), what="the workers deleted")
        after = await quiet(op)
    finally:
        op.kill()
    spent = requests(after)
    spent.subtract(requests(before))
    spent = +spent
    total = sum(spent.values())
    print(f"\none {WORKERS}-worker job's life {' '.join(flags)}: {total} requests", *sorted(spent.items()),
          sep="\n  ")
    assert total <= budget, f"{total} requests (budget {budget}): {dict(sorted(spent.items()))}"
    if flags:
        assert "POST events" not in spent and "PATCH configmaps" not in spent, dict(spent)
        unsent = (after.value("mpiop_events_total", result="unsent")
                  - before.value("mpiop_events_total", result="unsent"))
        assert unsent == 3, f"{unsent} lifecycle Events counted unsent, not 3"
