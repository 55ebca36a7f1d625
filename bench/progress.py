"""`python -m bench.progress`: the status endpoint under every running job reporting its progress at once.

On a simulated cluster (devcluster/simulated.py: the real control plane, kube-scheduler and KWOK), `mpiop run`
(as bench/operator.py runs it, its status endpoint on loopback) takes `--jobs` one-worker jobs to Running. Each
job's worker gets a token from the apiserver's TokenRequest API, bound to that pod with mpiop's audience (what
the kubelet's projected volume holds). Then, for `--seconds`, every job posts a progress report once a second
over HTTPS with the job's CA, spread evenly over each second. Printed:

* `posts_per_second`, `p50/p99_post_ms` and the answers by code (every post must be answered 202);
* `operator_cpu_cores`: the operator's CPU seconds per second of the window (and the apiserver's, etcd's and
  this load generator's, which share the machine's cores);
* `status_writes_per_job_minute`: the apiserver's PATCHes of mpijobs/status per job per minute, read from
  its own `apiserver_request_total` (bounded by `--status-write-seconds`: 6 at the default 10 s);
* `other_job_created_s` before and during the load: the seconds from creating one more job to its first
  status (mpiop's `Created` condition), `--probes` times each (during the load, spread evenly over its
  window), so the status latency of jobs that do not post is compared with and without the load.

One JSON line ends the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import time
from collections import Counter
from pathlib import Path

import aiohttp

from bench.cpu import CpuMeter
from bench.harness import bench_job, fresh_namespace, percentile
from bench.operator import BenchOperator
from bench.outage import wait_all_running
from bench.report import load, log, run_and_print
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, KubeClient
from testkit.metrics import Metrics
from testkit.rbac import pod_token

NAMESPACE = "bench-progress"
CA_KEY = "mpiop-status-ca.crt"


def status_patches(cluster: SimulatedCluster) -> float:
    """The apiserver's own count of PATCHes of mpijobs/status so far."""
    text = cluster.control_plane.get("/metrics")
    if not isinstance(text, str):
        raise RuntimeError("the apiserver's /metrics did not answer")
    return Metrics.parse(text).value("apiserver_request_total", verb="PATCH", resource="mpijobs",
                                     subresource="status")


async def created_after(kube: KubeClient, name: str, timeout: float = 120.0) -> float:
    """Create one more job; seconds until mpiop wrote its first status (the Created condition)."""
    started = time.monotonic()
    await kube.create(MPIJOBS, NAMESPACE, bench_job(name, 1))
    while time.monotonic() - started < timeout:
        job = await kube.get(MPIJOBS, NAMESPACE, name)
        if any(c.get("type") == "Created" for c in (job.get("status") or {}).get("conditions") or []):
            return time.monotonic() - started
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{name}: no Created condition within {timeout}s")


async def probe_jobs(kube: KubeClient, prefix: str, count: int, every: float = 1.0) -> list[float]:
    """`count` jobs, one each `every` seconds from `every / 2` on: spread over the load's window, so its first
    seconds (every token reviewed once) weigh as much as the rest and no more."""
    figures = []
    await asyncio.sleep(every / 2)
    for index in range(count):
        started = time.monotonic()
        figures.append(await created_after(kube, f"{prefix}-{index}"))
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
    return figures


async def tokens(kube: KubeClient, jobs: int) -> list[str]:
    """A token bound to each job's worker pod, with mpiop's audience."""
    pods = {p["metadata"]["name"]: p for p in (await kube.list(PODS, NAMESPACE))["items"]}
    semaphore = asyncio.Semaphore(32)

    async def one(index: int) -> str:
        async with semaphore:
            return await pod_token(kube, NAMESPACE, pods[f"job-{index}-worker-0"])

    return list(await asyncio.gather(*(one(i) for i in range(jobs))))


async def post_load(urls: list[str], tokens_: list[str], ca: str, seconds: float) -> tuple[list[float], Counter[int]]:
    """Every job posts once a second for `seconds`, job i at i/len(urls) into each second; (latencies, codes)."""
    context = ssl.create_default_context(cadata=ca)
    latencies: list[float] = []
    codes: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(limit=256, ssl=context)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic() + 1.0

        async def job(index: int) -> None:
            headers = {"Authorization": f"Bearer {tokens_[index]}", "Content-Type": "application/json"}
            tick = 0
            while (due := start + tick + index / len(urls)) < start + seconds:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                percent = min(100, int(100 * (tick + 1) / seconds))  # a whole percentage, as the API takes
                body = json.dumps({"trainerStatus": {"progressPercentage": percent,
                                                     "estimatedRemainingSeconds": int(seconds - tick)}})
                sent = time.monotonic()
                try:
                    async with session.post(urls[index], data=body, headers=headers) as response:
                        await response.read()
                        codes[response.status] += 1
                except (aiohttp.ClientError, TimeoutError):
                    codes[0] += 1
                latencies.append(time.monotonic() - sent)
                tick += 1

        await asyncio.gather(*(job(i) for i in range(len(urls))))
    return latencies, codes


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    nodes = max(4, args.jobs * 2 // 100 + 2)
    with SimulatedCluster(nodes=nodes) as cluster:
        kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
        operator = BenchOperator(cluster.kubeconfig, workdir / "operator.log",
                                 [f"--status-write-seconds={args.status_write_seconds:g}"])
        try:
            await install_crd(kube)
            await fresh_namespace(kube, NAMESPACE)
            operator.start()
            await operator.wait_synced()
            semaphore = asyncio.Semaphore(64)

            async def create(index: int) -> None:
                async with semaphore:
                    await kube.create(MPIJOBS, NAMESPACE, bench_job(f"job-{index}", 1))

            await asyncio.gather(*(create(i) for i in range(args.jobs)))
            took = await wait_all_running(kube, args.jobs, 1800.0, NAMESPACE)
            log(f"{args.jobs} jobs Running in {took:.1f}s; operator log {operator.log_path}")
            ca = (await kube.get(CONFIGMAPS, NAMESPACE, "job-0-config"))["data"][CA_KEY]
            urls = [f"{operator.status_url}/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs/job-{i}/status"
                    for i in range(args.jobs)]
            bound = await tokens(kube, args.jobs)
            quiet = await probe_jobs(kube, "quiet", args.probes)
            log(f"first status of other jobs, no posts: {[round(s, 3) for s in quiet]}")

            pids = {"operator": operator.pid, **{k: v for k, v in cluster.control_plane.pids_by_name().items()
                                                 if k in ("kube-apiserver", "etcd")}}
            patches_before, meter = status_patches(cluster), CpuMeter(pids)
            generator_before, window_start = time.process_time(), time.monotonic()
            load_start = load()
            (latencies, codes), busy = await asyncio.gather(
                post_load(urls, bound, ca, args.seconds),
                probe_jobs(kube, "busy", args.probes, every=args.seconds / args.probes))
            window = time.monotonic() - window_start
            cpu = meter.stop()
            generator = time.process_time() - generator_before
            patches = status_patches(cluster) - patches_before
            log(f"first status of other jobs, while {args.jobs} jobs post: {[round(s, 3) for s in busy]}")
            if not operator.running():
                raise RuntimeError(f"the operator exited under the load; see {operator.log_path}")
            ms = [latency * 1000 for latency in latencies]
            return {
                "jobs": args.jobs, "seconds": args.seconds, "status_write_seconds": args.status_write_seconds,
                "posts": len(latencies), "posts_per_second": round(len(latencies) / window, 1),
                "answers": {str(code): count for code, count in sorted(codes.items())},
                "p50_post_ms": round(percentile(ms, 50), 1), "p99_post_ms": round(percentile(ms, 99), 1),
                "max_post_ms": round(max(ms), 1),
                "operator_cpu_cores": round(cpu["operator"] / window, 3),
                "apiserver_cpu_cores": round(cpu.get("kube-apiserver", 0.0) / window, 3),
                "etcd_cpu_cores": round(cpu.get("etcd", 0.0) / window, 3),
                "load_generator_cpu_cores": round(generator / window, 3),
                "status_patches": patches,
                "status_writes_per_job_minute": round(patches / args.jobs / (window / 60), 2),
                "other_job_created_s_quiet": [round(s, 3) for s in quiet],
                "other_job_created_s_busy": [round(s, 3) for s in busy],
                "operator_rss_mb": round(operator.rss_mb(), 1),
                "load_start": load_start, "load_end": load(),
            }
        finally:
            operator.stop()
            await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.progress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="running jobs, each posting (default 1000)")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long every job posts (default 120)")
    parser.add_argument("--probes", type=int, default=5,
                        help="other jobs created before the load (one a second) and spread over it (default 5)")
    parser.add_argument("--status-write-seconds", type=float, default=10.0,
                        help="the operator's coalescing interval (its default, 10)")
    parser.add_argument("--keep-logs", type=Path, default=None, help="keep the operator's log in this directory")
    args = parser.parse_args()
    run_and_print(run, args, "mpiop-progress-")


if __name__ == "__main__":
    main()
