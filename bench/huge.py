"""Huge jobs: decide() at 1,000 and 10,000 workers, and (--live) the event loop while mpiop runs one.

    .venv/bin/python -m bench.huge                 # decide() figures only, ~1 minute
    .venv/bin/python -m bench.huge --live          # + a 10,000-worker job on a real control plane, ~5 minutes

decide() (pure, no I/O) is timed for one job of N workers in three states: no pod yet (one pass plans its
share of MAX_POD_CREATES_PER_PASS pods), every pass of the creation until every pod is planned (their sum
is the CPU the whole build costs), and settled (every pod exists and runs: what each later pass costs).

--live runs mpiop in-process (the Manager, as `mpiop run` does) against etcd + kube-apiserver +
kube-controller-manager (no kubelet: pods stay Pending, as in the integration tests), submits one job of
N workers, and meanwhile (a) a ticker measures the event loop's lag (how late a 10 ms sleep wakes up),
(b) a small job is submitted a second later, timed from create to its pods existing: other jobs must go on.
No figure is asserted anywhere; the lines printed are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import os
import time
from collections.abc import Callable
from typing import Any

from mpiop import podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.trims import trim_pod
from mpiop.decide import decide
from mpiop.desired import objects
from mpiop.plan import Observed

NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def manifest(name: str, workers: int) -> JSON:
    container = {"name": "main", "image": "mpioperator/mpi-pi:openmpi"}
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {"mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{**container, "command": ["mpirun"]}]}}},
            "Worker": {"replicas": workers, "template": {"spec": {"containers": [container]}}},
        }},
    }


def _job(workers: int) -> MPIJob:
    raw = manifest("huge", workers)
    raw["metadata"].update(namespace="bench", uid="uid-huge")
    return MPIJob.model_validate(raw)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of this process: what the decision costs, whatever else the (shared) machine runs."""
    started = time.process_time()
    result = fn()
    return time.process_time() - started, result


def _running(pod: JSON) -> JSON:
    """The pod as the informer caches it once it runs (trimmed, its state read once)."""
    return trim_pod({**pod, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def decide_figures(workers: int, repeats: int = 5) -> dict[str, float]:
    job = _job(workers)
    first = min(_timed(lambda: decide(job, Observed(), NOW))[0] for _ in range(repeats))
    # Every pass of the creation, each seeing the pods planned so far (as the caches would).
    pods: list[JSON] = []
    passes: list[float] = []
    observed = Observed()
    while True:
        seconds, plan = _timed(functools.partial(decide, job, observed, NOW))
        passes.append(seconds)
        made = [_running(o) for o in plan.creation_steps.pods()]
        if not made:
            break
        pods += made
        running = sorted(podstate.replica_index(p) or 0 for p in pods if podstate.role(p) == "worker")
        observed = Observed(pods=pods, config_map=objects.config_map(job, running),
                            secret={"metadata": {}}, service={"metadata": {}})
    settled = [_timed(functools.partial(decide, job, Observed(pods=pods, config_map=observed.config_map,
                                                               secret=observed.secret, service=observed.service),
                                        NOW))[0] for _ in range(repeats)]
    return {"first_pass_s": first, "build_all_s": sum(passes), "max_pass_s": max(passes),
            "passes": float(len(passes)), "settled_s": min(settled)}


async def live(workers: int) -> None:
    from devcluster.controlplane import ControlPlane
    from devcluster.install import install_crd
    from mpiop.controller.manager import Manager, ManagerConfig
    from mpiop.kube.client import MPIJOBS, NAMESPACES, ApiError, KubeClient

    with ControlPlane(scheduler=False) as plane:
        kube = await KubeClient.connect(str(plane.kubeconfig), qps=0, burst=1000)
        await install_crd(kube)
        ns = "huge"
        await kube.create(NAMESPACES, None, {"metadata": {"name": ns}})
        while True:  # the default ServiceAccount, which pod admission wants
            try:
                await kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                break
            except ApiError:  # not there yet
                await asyncio.sleep(0.1)
        client = await KubeClient.connect(str(plane.kubeconfig), qps=0, burst=1000)
        manager = Manager(client, ManagerConfig(namespace=ns))
        stop = asyncio.Event()
        running = asyncio.create_task(manager.run(stop))
        await manager.synced.wait()

        lags: list[float] = []
        held: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            """How late a 10 ms sleep wakes (wall: the machine's load inflates it), and how much CPU the event
            loop's own thread spent meanwhile (what held the loop, whatever else the machine runs)."""
            while not done.is_set():
                started, cpu = time.perf_counter(), time.thread_time()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - started - 0.01)
                held.append(time.thread_time() - cpu)

        def count(job: str) -> int:
            return sum(1 for key in manager.caches.pods.cached_keys() if key.startswith(f"{ns}/{job}-"))

        ticking = asyncio.create_task(ticker())
        started = time.monotonic()
        await kube.create(MPIJOBS, ns, manifest("huge", workers))
        await asyncio.sleep(1.0)
        small_sent = time.monotonic()
        await kube.create(MPIJOBS, ns, manifest("small", 2))
        await _until(lambda: count("small") >= 3)
        small_s = time.monotonic() - small_sent
        print(f"  small job (2 workers) submitted 1 s after the huge one: its pods exist in {small_s:.2f} s")
        await _until(lambda: count("huge") >= workers + 1)
        huge_s = time.monotonic() - started
        done.set()
        await ticking
        print(f"  huge job ({workers:,} workers): every pod created in {huge_s:.1f} s "
              f"({(workers + 1) / huge_s:.0f} pods/s)")
        for what, values in (("event-loop lag (wall)", lags), ("loop thread CPU per 10 ms tick", held)):
            values.sort()
            print(f"  {what} over {len(values):,} ticks: p50 {values[len(values) // 2] * 1e3:.1f} ms, "
                  f"p99 {values[int(len(values) * 0.99)] * 1e3:.1f} ms, max {values[-1] * 1e3:.1f} ms")
        print(f"  load average (1, 5, 15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        stop.set()
        await running
        await client.close()
        await kube.close()


async def _until(condition: Callable[[], bool]) -> None:
    """Poll the operator's own cache (no request: the bench's polling must not load the apiserver)."""
    while not condition():  # noqa: ASYNC110 - the cache has no change notification to wait on
        await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="worker counts for decide() (default 1000,10000)")
    parser.add_argument("--live", action="store_true", help="also run one job on a real control plane")
    parser.add_argument("--live-workers", type=int, default=10_000)
    args = parser.parse_args(argv)
    print("decide() of one job, CPU seconds (max: the longest one pass holds the event loop, on an idle core)")
    for workers in (int(n) for n in args.sizes.split(",")):
        figures = decide_figures(workers)
        print(f"  {workers:>6,} workers: first pass {figures['first_pass_s']:.3f}  "
              f"every pass until all planned {figures['build_all_s']:.3f} ({figures['passes']:.0f} passes, "
              f"max {figures['max_pass_s']:.3f})  settled {figures['settled_s']:.3f}", flush=True)
    if args.live:
        print(f"live: mpiop in-process, one {args.live_workers:,}-worker job on a real control plane", flush=True)
        asyncio.run(live(args.live_workers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
