"""`python -m bench.outage`: how soon mpiop serves new work after the apiserver comes back from an outage.

On a simulated cluster (devcluster/simulated.py: the real control plane, kube-scheduler and KWOK), `mpiop run`
(as bench/operator.py runs it) takes `--jobs` jobs to Running. Then, for each `--outages` length, the
kube-apiserver process is SIGKILLed (etcd, the scheduler, KWOK and the operator keep running and see their
connections refused), left down that long, and started again with the same flags. As soon as its /readyz
answers (the return), one new MPIJob is submitted through a fresh client; printed, from the return:

* `pods`: every pod of the new job exists (what mpiop's informers and reconciler must be back for);
* `scheduled`: every pod bound to a node (kube-scheduler's own client-go reconnect backoff);
* `running`: its pods Running (KWOK's, after the scheduler's);
* `job_running`: the job's Running condition (mpiop saw the pods run and wrote status).

The target is `pods` within 5 s whatever the outage's length. One JSON line ends the run.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.harness import bench_job, fresh_namespace
from bench.operator import BenchOperator
from bench.report import load, log, run_and_print
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop import names
from mpiop.kube.client import MPIJOBS, PODS, ApiError, KubeClient

NAMESPACE = "bench-outage"
APISERVER = "kube-apiserver"
POLL = 0.05


async def create_job(kubeconfig: Path, name: str, workers: int, deadline: float) -> None:
    """Submit one job through a fresh client, retried until the apiserver takes it (it may still be warming)."""
    while True:
        kube = await KubeClient.connect(str(kubeconfig), qps=0, burst=100)
        try:
            await kube.create(MPIJOBS, NAMESPACE, bench_job(name, workers))
            return
        except (ApiError, OSError, TimeoutError) as error:
            if time.monotonic() > deadline:
                raise
            log(f"create {name}: {error!s:.200}; again")
        finally:
            await kube.close()
        await asyncio.sleep(POLL)


async def job_progress(kube: KubeClient, name: str) -> tuple[int, int, int, bool]:
    """(pods that exist, pods bound to a node, pods Running, the job's Running condition True) now."""
    listed = await kube.list(PODS, NAMESPACE, labelSelector=f"{names.JOB_NAME_LABEL}={name}")
    items = listed.get("items", [])
    bound = sum(bool((p.get("spec") or {}).get("nodeName")) for p in items)
    running = sum((p.get("status") or {}).get("phase") == "Running" for p in items)
    job = await kube.get(MPIJOBS, NAMESPACE, name)
    conditions = (job.get("status") or {}).get("conditions") or []
    job_running = any(c.get("type") == "Running" and c.get("status") == "True" for c in conditions)
    return len(items), bound, running, job_running


async def wait_for_job(kubeconfig: Path, name: str, workers: int, since: float, timeout: float) -> dict[str, float]:
    """Seconds from `since` until the job's pods exist, are scheduled (kube-scheduler's reconnect), run (KWOK's),
    and the job is Running (mpiop's status write), polled through a fresh client."""
    pods_wanted = workers + 1
    figures: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    kube = await KubeClient.connect(str(kubeconfig), qps=0, burst=100)
    try:
        while len(figures) < 4:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {name} after the outage: only {sorted(figures)} within {timeout}s")
            try:
                exist, bound, running, job_running = await job_progress(kube, name)
            except (ApiError, OSError, TimeoutError):
                await asyncio.sleep(POLL)
                continue
            now = round(time.monotonic() - since, 2)
            if exist >= pods_wanted:
                figures.setdefault("pods_s", now)
            if bound >= pods_wanted:
                figures.setdefault("scheduled_s", now)
            if running >= pods_wanted:
                figures.setdefault("running_s", now)
            if job_running:
                figures.setdefault("job_running_s", now)
            await asyncio.sleep(POLL)
    finally:
        await kube.close()
    return figures


async def wait_all_running(kube: KubeClient, count: int, timeout: float, namespace: str = NAMESPACE) -> float:
    """Wait until `count` jobs of `namespace` have their Running condition; seconds taken."""
    started = time.monotonic()
    while True:
        jobs = (await kube.list(MPIJOBS, namespace)).get("items", [])
        running = sum(any(c.get("type") == "Running" and c.get("status") == "True"
                          for c in (j.get("status") or {}).get("conditions") or []) for j in jobs)
        if running >= count:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{running}/{count} jobs Running after {timeout}s")
        await asyncio.sleep(0.5)


def wait_back(cluster: SimulatedCluster, timeout: float) -> float:
    """Poll /readyz until the apiserver answers ok; the monotonic time it first did (the return)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.control_plane.get("/readyz") == "ok":
            return time.monotonic()
        time.sleep(POLL)
    raise TimeoutError(f"kube-apiserver not ready {timeout}s after its restart")


async def outage(cluster: SimulatedCluster, seconds: float, index: int, workers: int) -> dict[str, float]:
    log(f"outage {index}: kube-apiserver killed for {seconds:g}s")
    cluster.control_plane.kill(APISERVER)
    await asyncio.sleep(seconds)
    cluster.control_plane.revive(APISERVER)
    returned = await asyncio.to_thread(wait_back, cluster, 120.0)
    name = f"after-outage-{index}"
    await create_job(cluster.kubeconfig, name, workers, returned + 120)
    figures = await wait_for_job(cluster.kubeconfig, name, workers, returned, 300.0)
    log(f"outage {index} ({seconds:g}s): from the apiserver's return: {figures}")
    return figures


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    nodes = max(4, (args.jobs * (args.workers + 1) + 2 * (args.workers + 1) * len(args.outages)) // 100 + 2)
    with SimulatedCluster(nodes=nodes) as cluster:
        kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
        operator = BenchOperator(cluster.kubeconfig, workdir / "operator.log")
        try:
            await install_crd(kube)
            await fresh_namespace(kube, NAMESPACE)
            operator.start()
            await operator.wait_synced()
            await asyncio.gather(*(kube.create(MPIJOBS, NAMESPACE, bench_job(f"steady-{i}", args.workers))
                                   for i in range(args.jobs)))
            took = await wait_all_running(kube, args.jobs, 600.0)
            log(f"{args.jobs} jobs x {args.workers} workers Running in {took:.1f}s; operator log {operator.log_path}")
            results: dict[str, object] = {"jobs": args.jobs, "workers": args.workers, "load_start": load()}
            for index, seconds in enumerate(args.outages):
                figures = await outage(cluster, seconds, index, args.workers)
                for key, value in figures.items():
                    results[f"outage{index}_{seconds:g}s_{key}"] = value
                if not operator.running():
                    raise RuntimeError(f"the operator exited during the outage; see {operator.log_path}")
            results["load_end"] = load()
            return results
        finally:
            operator.stop()
            await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.outage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50, help="jobs Running before the outages (default 50)")
    parser.add_argument("--workers", type=int, default=2, help="workers per job (default 2)")
    parser.add_argument("--outages", type=float, nargs="+", default=[20.0, 120.0],
                        help="outage lengths in seconds, one after the other (default 20 120; repeat one to see "
                             "its spread: where the backoffs stand at the return is chance)")
    parser.add_argument("--keep-logs", type=Path, default=None, help="keep the operator's log in this directory")
    args = parser.parse_args()
    run_and_print(run, args, "mpiop-outage-")


if __name__ == "__main__":
    main()
