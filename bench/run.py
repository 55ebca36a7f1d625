"""The benchmark: floor, burst, big jobs, then 1,000 settled jobs for restart, memory and status latency.

Order and why:

1. floor   J jobs x (Secret, ConfigMap, Service, W+1 Pods, one status write) through a bare async client at
           the operator's concurrency, before any operator runs: the apiserver's own limit on this machine.
           The namespace is then deleted (and waited for) so the operator starts on a clean cluster.
   lifecycle  the floor again, plus what mpiop's defaults write once each job runs and ends (decide()'s plan:
           Running and Succeeded status, Events, discover_hosts.sh, one DELETE collection), by the bench
           itself as each job's pods all run: every job Running as early as the barest operator makes it
           (bench/lifecycle.py).
2. burst   `mpiop run` (defaults) is started; J jobs x W workers are submitted at once. Timed: every pod
           exists (burst_s, compared with floor_s), every job Running, every job Succeeded (the bench
           marks each launcher Succeeded as soon as its job is Running). API requests per job are read off
           the operator's own request counter.
3. big     one job with 64 workers, then one with 256: create to launcher pod created.
   sustained  jobs of 1 worker arrive at a steady rate (`--rates`, default 5/s, for `--sustained-seconds`),
           run 5 s and are deleted by a 20 s TTL: queue depth and create -> first status percentiles over
           time, and per rate (bench/sustained.py).
   qps50   the burst again (fresh namespace) with `--kube-api-qps=50 --kube-api-burst=100`, client-go's
           classic client-side limit (and mpiop's default until it was turned off): what such a limiter
           costs (burst_qps50_s, burst_qps50_over_floor).
4. scale   the operator is stopped; 1,000 jobs (default 9 workers: 10,000 pods) are created with the same
           bare client and mpiop's own object builders, and KWOK runs their pods; a fresh operator adopts
           and settles them (status, hostfile). Then:
   restart   the operator is restarted: seconds from exec to ready (/readyz), to caches synced and to the
             end of its first reconcile, and the writes it makes while it reconciles every job once (a settled
             job needs none). `python -m bench.startup` times the same on a few jobs, start after start.
   memory    the restarted operator's VmRSS, with every pod in its caches.
   latency   launchers of sampled jobs are marked Succeeded one at a time (every `--latency-interval`);
             time from sending the pod status write to the MPIJob status showing Succeeded.

Everything runs on a SimulatedCluster (devcluster/simulated.py) that is torn down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import structlog

from bench import baseline
from bench.operator import BenchOperator, profile_summary
from bench.phases import big_jobs, burst, scale
from bench.report import PHASES, QPS50_ARGS, Options, Report, load, log, profile_path
from bench.series import by_source, floor_and_burst
from bench.sustained import sustained
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop.kube.client import KubeClient


def nodes_needed(opts: Options) -> int:
    if opts.nodes:
        return opts.nodes
    # A sustained job's 2 pods live from its creation to its TTL deletion (plus slack for a lagging operator).
    sustained = max(opts.sustained_rates, default=0.0) * (opts.sustained_run_seconds + opts.sustained_ttl + 30) * 2
    peak = max(opts.jobs * (opts.workers + 1), int(sustained),
               2 * opts.jobs + sum(opts.big) + 2 + opts.scale_jobs * (opts.scale_workers + 1))
    return math.ceil(peak * 1.1 / opts.pods_per_node) + 1


async def bench(cluster: SimulatedCluster, opts: Options, report: Report, logs: Path) -> None:
    kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
    operator: BenchOperator | None = None
    try:
        await install_crd(kube)
        if {"floor", "lifecycle", "burst", "big"} & set(opts.phases):
            operator = await floor_and_burst(kube, cluster, opts, report, logs)
        if "big" in opts.phases and operator is not None:
            await big_jobs(kube, operator, opts, report)
        if "sustained" in opts.phases:
            if operator is None:
                operator = BenchOperator(cluster.kubeconfig, logs / "operator.log", opts.operator_args,
                                           profile_path(opts, "sustained"))
                operator.start()
                await operator.wait_synced()
                await operator.wait_metrics()
            await sustained(kube, operator, opts, report)
        if operator is not None:
            report.add("rss_mb_after_burst", round(operator.rss_mb(), 1),
                       "memory: operator RSS after the burst and big jobs (MB)")
        if "qps50" in opts.phases:
            # The same burst behind a client-side rate limiter: what would 50 QPS cost?
            if operator is not None:
                operator.stop()
            operator = BenchOperator(cluster.kubeconfig, logs / "operator.log",
                                       [*opts.operator_args, *QPS50_ARGS], profile_path(opts, "qps50"))
            operator.start()
            await operator.wait_synced()
            await operator.wait_metrics()
            await burst(kube, operator, opts, report, tag="_qps50")
        if "scale" in opts.phases:
            operator = await scale(kube, cluster, operator, opts, report, logs)
        if "floor_s" in report.figures and "burst_qps50_s" in report.figures:
            report.add("burst_qps50_over_floor",
                       round(report.figures["burst_qps50_s"] / report.figures["floor_s"], 2),
                       "what-if: burst / floor with --kube-api-qps=50 --kube-api-burst=100")
    finally:
        if operator is not None:
            operator.stop()
        await kube.close()


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="burst/floor: jobs submitted at once (200)")
    parser.add_argument("--workers", type=int, default=8, help="burst/floor: workers per job (8)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="requests in flight for the bench's submissions and the floor (32, like mpiop's "
                             "create concurrency)")
    parser.add_argument("--big", default="64,256", help="big-job worker counts (64,256)")
    parser.add_argument("--scale-jobs", type=int, default=1000, help="jobs present for restart/latency (1000)")
    parser.add_argument("--scale-workers", type=int, default=9, help="workers per scale job (9: 10 pods/job)")
    parser.add_argument("--latency-samples", type=int, default=120)
    parser.add_argument("--latency-interval", type=float, default=0.5,
                        help="seconds between sampled phase changes (0.5: 2 jobs finishing a second)")
    parser.add_argument("--pods-per-node", type=int, default=110)
    parser.add_argument("--nodes", type=int, default=0, help="fake nodes (default: enough for the peak)")
    parser.add_argument("--operator-arg", action="append", default=[],
                        help="extra `mpiop run` flag for a what-if run, e.g. --operator-arg=--kube-api-qps=200")
    parser.add_argument("--operator-source", type=Path, action="append", default=[],
                        help="floor/burst: also run the burst with another checkout's mpiop (a git worktree of an "
                             "older commit), runs taking this checkout and each source in turn; use with --repeat")
    parser.add_argument("--against", action="append", default=[], metavar="REV",
                        help="floor/burst: also run the burst with the operator of commit REV (e.g. HEAD~1, main), "
                             "checked out into a worktree of its own, and print each figure's ratio to it; runs take "
                             "this checkout and each in turn (at least one run each; --repeat 4: both orders)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"subset of {','.join(PHASES)}")
    parser.add_argument("--rates", default="5", help="sustained: comma-separated arrival rates, jobs/s (5)")
    parser.add_argument("--sustained-seconds", type=float, default=300.0, help="sustained: seconds per rate (300)")
    parser.add_argument("--sustained-run-seconds", type=float, default=5.0,
                        help="sustained: seconds each launcher runs before it succeeds (5)")
    parser.add_argument("--sustained-ttl", type=int, default=20, help="sustained: ttlSecondsAfterFinished (20)")
    parser.add_argument("--sustained-report", type=float, default=10.0,
                        help="sustained: seconds between progress lines (10)")
    parser.add_argument("--quick", action="store_true",
                        help="a small run: 20x4 burst, 16/32 big, 2 jobs/s for 60 s, 100 scale jobs")
    parser.add_argument("--repeat", type=int, default=1,
                        help="floor and burst this many times; figures are median [min-max] (1)")
    parser.add_argument("--quiet-load", type=float, default=0.0,
                        help="quiet check: the 1-minute load average a run should start under (default: CPUs/2)")
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="quiet check: seconds to wait for that load before each run (0: only report it)")
    parser.add_argument("--clean-pod-policy", choices=("Running", "All", "None"),
                        help="burst: the jobs' cleanPodPolicy (default: the API's default, Running)")
    parser.add_argument("--apiserver-flag", action="append", default=[],
                        help="an extra kube-apiserver flag (repeatable; a later value of a flag wins), e.g. "
                             "--apiserver-flag=--storage-media-type=application/json")
    parser.add_argument("--keep-logs", type=Path, help="copy the component and operator logs here")
    parser.add_argument("--profile", type=Path,
                        help="record each operator process with py-spy into this directory (needs py-spy)")
    args = parser.parse_args(argv)
    opts = Options(jobs=args.jobs, workers=args.workers, concurrency=args.concurrency,
                   big=tuple(int(b) for b in args.big.split(",") if b), scale_jobs=args.scale_jobs,
                   scale_workers=args.scale_workers, latency_samples=args.latency_samples,
                   latency_interval=args.latency_interval, pods_per_node=args.pods_per_node, nodes=args.nodes,
                   operator_args=args.operator_arg,
                   operator_sources=(None, *(p.resolve() for p in args.operator_source),
                                     *(baseline.checkout(rev) for rev in args.against)),
                   apiserver_flags=args.apiserver_flag,
                   phases=tuple(p for p in args.phases.split(",") if p),
                   keep_logs=args.keep_logs, profile=args.profile,
                   repeat=max(args.repeat, 1 + len(args.operator_source) + len(args.against)),  # one burst each
                   quiet_load=args.quiet_load, quiet_wait=args.quiet_wait, clean_pod_policy=args.clean_pod_policy,
                   sustained_rates=tuple(float(r) for r in args.rates.split(",") if r),
                   sustained_seconds=args.sustained_seconds, sustained_run_seconds=args.sustained_run_seconds,
                   sustained_ttl=args.sustained_ttl, sustained_report=args.sustained_report)
    if args.quick:
        opts.jobs, opts.workers, opts.big, opts.scale_jobs, opts.latency_samples = 20, 4, (16, 32), 100, 40
        opts.sustained_rates, opts.sustained_seconds = (2.0,), 60.0
    unknown = set(opts.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    # mpiop's parts in the bench process (its informers, the lifecycle's Event recorder) say only what goes
    # wrong: an info line per Event would be the bench's own CPU in the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    report = Report()
    nodes = nodes_needed(opts)
    load_before = load()
    logs = Path(tempfile.mkdtemp(prefix="mpiop-bench-"))
    log(f"load average {load_before}; starting a simulated cluster with {nodes} fake nodes")
    cluster = SimulatedCluster(nodes=nodes, pods_per_node=opts.pods_per_node,
                               extra_apiserver_flags=opts.apiserver_flags)
    started = time.monotonic()
    try:
        cluster.start()
        report.figures["control_plane"] = cluster.control_plane.describe()
        log(f"cluster up in {time.monotonic() - started:.1f}s: {report.figures['control_plane']}")
        asyncio.run(bench(cluster, opts, report, logs))
    finally:
        if opts.keep_logs is not None:
            opts.keep_logs.mkdir(parents=True, exist_ok=True)
            workdir = cluster.control_plane.workdir
            if workdir is not None and (workdir / "logs").is_dir():
                shutil.copytree(workdir / "logs", opts.keep_logs / "cluster", dirs_exist_ok=True)
            shutil.copytree(logs, opts.keep_logs / "operator", dirs_exist_ok=True)
        cluster.stop()
        shutil.rmtree(logs, ignore_errors=True)
    report.figures["load_average_before"] = load_before
    report.figures["load_average_after"] = load()
    report.figures["cpus"] = os.cpu_count()
    report.figures["nodes"] = nodes
    report.figures["operator_args"] = opts.operator_args
    report.figures["apiserver_flags"] = opts.apiserver_flags
    report.figures["bench_seconds"] = round(time.monotonic() - started, 1)
    if opts.profile is not None:
        for raw in sorted(opts.profile.glob("operator-*.raw")):
            print(f"py-spy profile {raw}:", *profile_summary(raw), sep="\n")
    print(report.table())
    by_verb = report.figures.get("api_requests_per_job_by_verb") or {}
    if by_verb:
        print("burst: operator API requests per job, by verb and resource:",
              *(f"  {k:<28} {v:>6}" for k, v in by_verb.items()), sep="\n")
    runs = report.figures.get("runs") or []
    if len({r.get("operator_source") for r in runs}) > 1:
        print("burst by operator source:", *by_source(runs), *baseline.ratios(runs), sep="\n")
    for n, run in enumerate(runs, 1):
        print(f"floor/burst run {n}: load average {run['load_before']} -> {run['load_after']}"
              f"{'' if run['quiet'] else ' (NOT QUIET)'}")
    print(f"load average before: {load_before}; after: {report.figures['load_average_after']} "
          f"({os.cpu_count()} CPUs); fake nodes: {nodes}; operator flags: {opts.operator_args or 'defaults'}")
    plane = report.figures.get("control_plane") or {}
    print(f"control plane: {plane.get('etcd')}; {plane.get('kube-apiserver')}; apiserver flags: "
          f"{' '.join(plane.get('apiserver_flags', []))}")
    print(json.dumps(report.figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
