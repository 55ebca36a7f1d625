"""What one 8-worker job costs the apiserver over its whole life, by the operator's own count.

`mpiop run` runs as a process; its `mpiop_api_requests_total` (/metrics) is read before the job is made and
once the job has succeeded, its workers are gone and the operator has been quiet for a while (Events are
sent in the background, so they are waited for too). The test fails above the budget and prints the
requests by verb and resource. It runs twice: with kubeflow's defaults, and with the two opt-outs
(--no-lifecycle-events --no-discover-hosts) that leave only the writes a job cannot do without: 16.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from devcluster.controlplane import ControlPlane
from testkit.operator import Cluster, eventually, mpijob
from testkit.process import OperatorProcess

WORKERS = 8
# 12 creations (Secret, ConfigMap, Service, launcher, 8 workers), 3 status writes (Created, Running,
# Succeeded: the replica counts ride along), the finished workers deleted in one DELETE collection (by the
# job's labels and phase, listed from the apiserver's watch cache), the hostfile's discover_hosts.sh (it lists
# the Running workers, kubeflow's contract for elastic Horovod) patched once when they run, and one Event per
# transition (Created, Running, Succeeded, as kubeflow records them). One DELETE per worker would make it 27.
BUDGET = 12 + 3 + 1 + 1 + 3
# Without the three lifecycle Events (only logged) and with a discover_hosts.sh that never changes.
LEAN = ("--no-lifecycle-events", "--no-discover-hosts")
LEAN_BUDGET = 12 + 3 + 1


@pytest.mark.parametrize(("flags", "budget"), [((), BUDGET), (LEAN, LEAN_BUDGET)], ids=["kubeflow-defaults", "lean"])
async def test_one_job_life_stays_within_the_request_budget(control_plane: ControlPlane, cluster: Cluster,
                                                            tmp_path: Path, flags: tuple[str, ...],
                                                            budget: int) -> None:
    op = OperatorProcess.in_namespace(str(control_plane.kubeconfig), cluster.ns, "mpiop", tmp_path, *flags)
    try:
        await eventually(op.ready, timeout=60, what="/readyz")
        before = await op.settle(quiet=3.0, timeout=60, every=0.5)
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
        after = await op.settle(quiet=3.0, timeout=60, every=0.5)
    finally:
        op.kill()
    spent = (after - before).by_verb()
    total = sum(spent.values())
    print(f"\none {WORKERS}-worker job's life {' '.join(flags)}: {total} requests", *sorted(spent.items()),
          sep="\n  ")
    assert total <= budget, f"{total} requests (budget {budget}): {dict(sorted(spent.items()))}"
    if flags:
        assert "POST events" not in spent and "PATCH configmaps" not in spent, dict(spent)
        unsent = (after.value("mpiop_events_total", result="unsent")
                  - before.value("mpiop_events_total", result="unsent"))
        assert unsent == 3, f"{unsent} lifecycle Events counted unsent, not 3"
