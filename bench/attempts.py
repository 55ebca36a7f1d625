"""Failed attempts at scale: `--jobs` jobs failing `--failures` times each on the simulated cluster.

Each round fails every job's Running launcher (a status write, as its kubelet would) and times the restart:
from that write to the next attempt's launcher pod appearing in a watch (the operator saved the attempt's
logs, wrote the status, deleted the pods and made the next ones in between). KWOK's nodes serve no logs, so
every log is read and recorded as unreadable, as from a node that is gone: the saving's worst case short of
its 10 s bound. At the end, the attempt ConfigMaps: how many, and their bytes against the bound
(jobs x --kept-attempts x 256 KiB). The last line is one JSON object.

    .venv/bin/python -m bench.attempts [--jobs 100] [--failures 10] [--kept-attempts 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.harness import Tracker, bench_job, finish_pod, percentile
from bench.operator import BenchOperator
from bench.phases import gather_limited
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop import names
from mpiop.desired.evidence import ATTEMPT_BYTES
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, KubeClient
from testkit.namespaces import create_namespace

NAMESPACE = "attempts"


def launcher(job: str, attempt: int) -> str:
    return f"{job}-launcher-{attempt}" if attempt else f"{job}-launcher"


async def run(jobs: int, failures: int, kept: int, workdir: Path) -> dict[str, Any]:
    with SimulatedCluster(nodes=max(2, jobs // 25)) as cluster:
        kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=1000)
        try:
            await install_crd(kube)
            await create_namespace(kube, NAMESPACE)
            operator = BenchOperator(cluster.kubeconfig, workdir / "operator.log",
                                       ["--namespace", NAMESPACE, f"--kept-attempts={kept}"])
            operator.start()
            await operator.wait_synced()
            try:
                return await _rounds(kube, jobs, failures, kept)
            finally:
                operator.stop()
        finally:
            await kube.close()


async def _rounds(kube: KubeClient, jobs: int, failures: int, kept: int) -> dict[str, Any]:
    names_ = [f"a{i}" for i in range(jobs)]
    latencies: list[float] = []
    async with Tracker(kube, NAMESPACE) as tracker:
        await gather_limited(16, [partial(kube.create, MPIJOBS, NAMESPACE, _job(n, failures)) for n in names_])
        for attempt in range(failures):
            current = [launcher(n, attempt) for n in names_]
            await tracker.wait_until(partial(_all_in, current, tracker.pod_running), 300,
                                     f"attempt {attempt + 1}'s launchers Running")
            failed_at: dict[str, float] = {}
            await gather_limited(16, [partial(_fail, kube, n, p, failed_at)
                                      for n, p in zip(names_, current, strict=True)])
            following = {n: launcher(n, attempt + 1) for n in names_}
            await tracker.wait_until(partial(_all_in, list(following.values()), tracker.pod_added), 300,
                                     f"attempt {attempt + 2}'s launchers")
            latencies += [tracker.pod_added[following[n]] - failed_at[n] for n in names_]
            print(f"round {attempt + 1}: {jobs} restarts, p50 {percentile(latencies[-jobs:], 50) * 1000:.0f} ms, "
                  f"p99 {percentile(latencies[-jobs:], 99) * 1000:.0f} ms", flush=True)
    maps = (await kube.list(CONFIGMAPS, NAMESPACE, labelSelector=names.ATTEMPT_LABEL))["items"]
    stored = [sum(len(k.encode()) + len(v.encode()) for k, v in (m.get("data") or {}).items()) for m in maps]
    bound = jobs * kept * ATTEMPT_BYTES
    return {"jobs": jobs, "failed_attempts": jobs * failures, "attempt_config_maps": len(maps),
            "config_map_bytes": sum(stored), "largest_config_map_bytes": max(stored, default=0),
            "bound_bytes": bound, "within_bound": sum(stored) <= bound and len(maps) <= jobs * kept,
            "restart_p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "restart_p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "restart_max_ms": round(max(latencies) * 1000, 1)}


def _all_in(pods: list[str], seen: dict[str, float]) -> bool:
    return all(p in seen for p in pods)


async def _fail(kube: KubeClient, job: str, pod: str, failed_at: dict[str, float]) -> None:
    failed_at[job] = time.monotonic()
    await finish_pod(kube, NAMESPACE, pod, "Failed")


def _job(name: str, failures: int) -> dict[str, Any]:
    job = bench_job(name, 1)
    job["spec"].setdefault("runPolicy", {})["backoffLimit"] = failures
    return job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attempts", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--failures", type=int, default=10, help="failed attempts per job")
    parser.add_argument("--kept-attempts", type=int, default=3)
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mpiop-attempts-") as workdir:
        result = asyncio.run(run(opts.jobs, opts.failures, opts.kept_attempts, Path(workdir)))
    print(f"{result['failed_attempts']} failed attempts across {result['jobs']} jobs: "
          f"{result['attempt_config_maps']} attempt ConfigMaps, {result['config_map_bytes']:,} bytes "
          f"(largest {result['largest_config_map_bytes']:,}; bound {result['bound_bytes']:,}); restart "
          f"p50 {result['restart_p50_ms']} ms, p99 {result['restart_p99_ms']} ms, max {result['restart_max_ms']} ms")
    print(json.dumps(result))
    return 0 if result["within_bound"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
