"""`python -m bench.hostile`: the leader under a hostile pod and a hostile tenant, against the same run quiet.

On a simulated cluster (devcluster/simulated.py: the real control plane, kube-scheduler, KWOK), `mpiop run` with
leader election (as bench/operator.py runs it; `--operator-source DIR` runs another checkout's mpiop) takes `--jobs`
jobs of `--workers` workers to Running; `--tainted-nodes` plain GPU nodes (8 GPUs, tainted) exist, and the GPU
layout webhook is registered for the tenant's namespace. Then two windows of `--flood-seconds` (+ `--after-seconds`):

* quiet: nothing else;
* attack (`--attacks flood,tenant`, or one alone; `webhook` in place of flood: bench/hostile_webhook.py's gzip
  bombs and reviews at the GPU layout webhook): one "pod" floods the status endpoint (bench/hostile_flood.py:
  junk and random bearer tokens with `--header-kb` of headers each, and slow connections), and one tenant creates
  a `gpus: 13` job with `--tolerations` tolerations, touches a tainted node's label every `--touch-seconds` and
  posts the job's AdmissionReview to the webhook `--webhook-posts` times (bench/hostile_tenant.py); `caches`: a
  tenant fills the caches with labelled ConfigMaps no job controls (bench/hostile_caches.py); `templates`: with
  ResourceClaimTemplates no job names (the same module). The flood
  stops by itself, or early once the leader's RSS passes `--rss-abort` MB (reported as aborted).

Measured from outside in both windows (bench/hostile_watch.py): the leader's RSS (before, peak, after), the
slowest /healthz answer polled every 50 ms (its event loop's longest stall), the Lease's renewals (gaps over twice
the retry period, holder changes), and `--probes` new jobs' time to first status (the Created condition). The
issue's targets: RSS growth <= 20 MB, loop lag < 1 s, no renewal missed, first status within 2x of quiet.
A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import hostile_caches
from bench import hostile_figures as figures
from bench.cpu import cpu_seconds
from bench.harness import Tracker, bench_job, fresh_namespace
from bench.hostile_tenant import NODE_PREFIX, Tenant, create_nodes
from bench.hostile_watch import HealthPoller, LeaseWatch, RssWatch
from bench.operator import BenchOperator
from bench.outage import wait_all_running
from bench.report import Report, load, log
from devcluster.controlplane import die_with_parent, free_port
from devcluster.install import install_crd
from devcluster.simulated import SimulatedCluster
from mpiop.desired import status_report
from mpiop.kube.client import MPIJOBS, KubeClient
from mpiop.serving.layout_webhook import CONFIGURATIONS
from testkit.layout_webhook import configuration
from testkit.process import ROOT

NAMESPACE, TENANT = "bench-hostile", "bench-hostile-tenant"
LEASE = ("default", "mpiop")  # --leader-elect-id's default, in the operator's POD_NAMESPACE
RETRY_PERIOD = 2.0  # --leader-elect-retry-period's default
WEBHOOK = "mpiop-gpu-layout"  # --gpu-layout-webhook's default


class Run:
    """The cluster's objects, the operator and the watchers, for both windows."""

    def __init__(self, args: argparse.Namespace, kube: KubeClient, operator: BenchOperator, health: HealthPoller,
                 tracker: Tracker, workdir: Path) -> None:
        self.args, self.kube, self.operator, self.health, self.tracker = args, kube, operator, health, tracker
        self.workdir = workdir
        self.lease = LeaseWatch(kube, *LEASE)
        self.rss = RssWatch(operator.pid, args.rss_abort)

    async def first_status(self, name: str) -> float | None:
        """Create a job; seconds until the bench's watch saw its Created condition (None: the operator exited, or
        not within --probe-timeout)."""
        started = time.monotonic()
        await self.kube.create(MPIJOBS, NAMESPACE, bench_job(name, self.args.workers))
        while time.monotonic() - started < self.args.probe_timeout and self.operator.running():
            if (seen := self.tracker.job_true.get(name, {}).get("Created")) is not None:
                return round(seen - started, 3)
            with contextlib.suppress(TimeoutError):
                await self.tracker.wait_until(lambda: "Created" in self.tracker.job_true.get(name, {}), 1.0, name)
        return None

    async def probes(self, prefix: str) -> list[float | None]:
        """`--probes` new jobs, one after another, the i-th not before (i + 0.5) / probes of the flood's length."""
        found: list[float | None] = []
        started = time.monotonic()
        for index in range(self.args.probes):
            await asyncio.sleep(max(0.0, started + (index + 0.5) * self.args.flood_seconds / self.args.probes
                                    - time.monotonic()))
            found.append(await self.first_status(f"{prefix}-{index}"))
        log(f"{prefix}: first status of new jobs {found}")
        return found

    async def window(self, name: str, attack: bool) -> dict[str, Any]:
        """One window: its probes (and the attack), then --after-seconds more; what it saw."""
        start, wall, cpu = time.monotonic(), time.time(), cpu_seconds(self.operator.pid)
        log(f"{name}: {self.args.flood_seconds:g}s" + (" of flood and hostile tenant" if attack else ", quiet"))
        probes = asyncio.create_task(self.probes(name))
        seen: dict[str, Any] = {}
        if attack:
            seen = await self.attack()
        else:
            await asyncio.sleep(self.args.flood_seconds)
        found = await probes
        await asyncio.sleep(self.args.after_seconds)
        end, end_wall = time.monotonic(), time.time()
        return {**seen, "probes": found, "start": start, "end": end,
                "lag": figures.loop_lag(self.health.probes, start, end),
                "renewals": figures.renewals(self.lease.seen, wall, end_wall, RETRY_PERIOD),
                "cpu_s": round(cpu_seconds(self.operator.pid) - cpu, 2)}

    async def start_flood(self, log_file: Path, webhook: bool = False) -> asyncio.subprocess.Process:
        args = self.args
        url = self.operator.status_url + status_report.path(NAMESPACE, "job-0")
        argv = ["bench.hostile_flood", url, f"--concurrency={args.concurrency}", f"--header-kb={args.header_kb}",
                f"--slow-connections={args.slow_connections}", f"--budget-mb={args.budget_mb}"] if not webhook else [
            "bench.hostile_webhook", self.operator.status_url, *args.webhook_arg]
        with log_file.open("ab") as flood_log:
            return await asyncio.create_subprocess_exec(
                sys.executable, "-m", *argv, f"--seconds={args.flood_seconds}",
                stdout=asyncio.subprocess.PIPE, stderr=flood_log, cwd=ROOT, preexec_fn=die_with_parent)

    async def attack(self) -> dict[str, Any]:
        """The flood and the tenant (those of --attacks), until the flood ends, or the window does without one; both
        stopped early once the leader passes --rss-abort or exits."""
        args, stop = self.args, asyncio.Event()
        tenant = Tenant(TENANT)
        flood = await self.start_flood(self.workdir / "flood.log") if "flood" in args.attacks else None
        if "webhook" in args.attacks:  # alone (--attacks webhook): its figures are the flood's
            flood = await self.start_flood(self.workdir / "webhook.log", webhook=True)
        tasks = [] if "tenant" not in args.attacks else [
            asyncio.create_task(tenant.create_job(self.kube, args.tolerations)),
            asyncio.create_task(tenant.touch(self.kube, f"{NODE_PREFIX}-0", args.touch_seconds, stop)),
            asyncio.create_task(tenant.post_reviews(self.operator.status_url, args.webhook_posts, args.flood_seconds,
                                                    args.webhook_timeout, stop, args.tolerations))]
        tasks += [asyncio.create_task(hostile_caches.fill(self.kube, args))] if "caches" in args.attacks else []
        tasks += [asyncio.create_task(hostile_caches.fill_templates(self.kube, args))] \
            if "templates" in args.attacks else []
        over, gone = asyncio.create_task(self.rss.over.wait()), asyncio.create_task(self.rss.gone.wait())
        ended = asyncio.create_task(flood.wait()) if flood is not None else None
        await asyncio.wait([over, gone, *([ended] if ended is not None else [])],
                           timeout=args.flood_seconds + (60 if flood is not None else 0),
                           return_when=asyncio.FIRST_COMPLETED)
        aborted = self.rss.over.is_set() and (ended is None or not ended.done())
        if aborted or self.rss.gone.is_set():
            log("attack: the leader's RSS passed --rss-abort: stopped" if aborted else "attack: the leader exited")
        stop.set()
        flooded: dict[str, Any] = {}
        if flood is not None:
            if flood.returncode is None:
                flood.send_signal(signal.SIGTERM)
            output, _ = await flood.communicate()
            flooded = json.loads(output.decode().strip().splitlines()[-1]) if output.strip() else {}
            log(f"attack: flood {flooded}")
        for task in (over, gone):
            task.cancel()
        await asyncio.gather(*tasks)
        return {"flood": flooded, "aborted": aborted, "tenant": tenant}


async def start(args: argparse.Namespace, cluster: SimulatedCluster, kube: KubeClient,
                workdir: Path) -> tuple[BenchOperator, int]:
    """The namespaces, the webhook's configuration, the tainted nodes, the leader, and its jobs Running."""
    await install_crd(kube)
    for namespace in (NAMESPACE, TENANT):
        await fresh_namespace(kube, namespace)
    health_port = free_port()
    operator = BenchOperator(cluster.kubeconfig, workdir / "operator.log",
                             ["--leader-elect", f"--health-addr=127.0.0.1:{health_port}", *args.operator_arg],
                             source=args.operator_source)
    await kube.create(CONFIGURATIONS, None, configuration(WEBHOOK, operator.status_url, TENANT))
    await create_nodes(kube, args.tainted_nodes)
    log(f"{args.tainted_nodes} tainted GPU nodes made; starting the operator"
        + (f" of {args.operator_source}" if args.operator_source else ""))
    operator.start()
    await operator.wait_synced()
    deadline = time.monotonic() + 60
    while not await operator.is_leader():
        if time.monotonic() > deadline or not operator.running():
            raise RuntimeError(f"the operator did not lead within 60 s; see {operator.log_path}")
        await asyncio.sleep(0.2)
    semaphore = asyncio.Semaphore(32)

    async def create(index: int) -> None:
        async with semaphore:
            await kube.create(MPIJOBS, NAMESPACE, bench_job(f"job-{index}", args.workers))

    await asyncio.gather(*(create(i) for i in range(args.jobs)))
    took = await wait_all_running(kube, args.jobs, 900.0, NAMESPACE)
    log(f"{args.jobs} jobs x {args.workers} workers Running in {took:.1f}s; operator log {operator.log_path}")
    return operator, health_port


def summarize(report: Report, quiet: dict[str, Any], attack: dict[str, Any], rss: figures.Rss,
              exit_code: int | None) -> None:
    """The table's rows and the JSON's figures, each target beside its figure."""
    lag_q, lag_a = quiet["lag"], attack["lag"]
    lease_q, lease_a = quiet["renewals"], attack["renewals"]
    ratio = figures.first_status_ratio(attack["probes"], [p for p in quiet["probes"] if p is not None])
    met = figures.targets_met(rss, lag_a, lease_a, ratio, exit_code is None)
    tenant: Tenant = attack["tenant"]
    mark = {True: "met", False: "MISSED"}
    report.add("rss_before_mb", round(rss.before_mb, 1), "leader RSS before the attack (MB)")
    report.add("rss_peak_mb", round(rss.peak_mb, 1), "leader RSS peak from the attack on (MB)")
    report.add("rss_after_mb", round(rss.after_mb, 1), "leader RSS after it (MB)")
    report.add("rss_growth_mb", rss.growth_mb, "leader RSS growth (MB)",
               f"<= {figures.RSS_GROWTH_MB:g} MB: {mark[met['rss_growth']]}")
    report.add("loop_lag_quiet_s", lag_q.worst_s, "longest /healthz answer, quiet (s)")
    report.add("loop_lag_attack_s", lag_a.worst_s, "longest /healthz answer, attack (s)",
               f"< {figures.LOOP_LAG_S:g} s: {mark[met['loop_lag']]}")
    report.add("healthz_unanswered_attack", lag_a.unanswered, f"/healthz probes unanswered, attack (of {lag_a.probes})")
    report.add("renewal_gap_quiet_s", lease_q.longest_gap_s, "longest Lease renewal gap, quiet (s)")
    report.add("renewal_gap_attack_s", lease_a.longest_gap_s, "longest Lease renewal gap, attack (s)")
    report.add("renewals_missed_attack", lease_a.missed, f"renewal gaps > {2 * RETRY_PERIOD:g} s, attack",
               f"0: {mark[met['no_renewal_missed']]}")
    report.add("lease_transitions_attack", lease_a.transitions, "Lease holder changes, attack")
    report.add("operator_exit_code", exit_code, "leader exit code (None: still running)")
    report.add("first_status_quiet_s", quiet["probes"], "new job to first status, quiet (s)",
               shown=str(quiet["probes"]))
    report.add("first_status_attack_s", attack["probes"], "new job to first status, attack (s)",
               shown=str(attack["probes"]))
    report.add("first_status_ratio", ratio, "slowest attack / slowest quiet (None: never)",
               f"<= {figures.FIRST_STATUS_RATIO:g}x: {mark[met['first_status']]}")
    answers = [n for kind in (attack["flood"].get("answers") or {}).values() for n in kind.items()]
    sent, answered = sum(n for _, n in answers), sum(n for code, n in answers if code.isdigit())
    report.add("flood_requests", sent, "flood requests sent (answered)", shown=f"{sent} ({answered})")
    report.add("flood_aborted", attack["aborted"], "flood stopped by --rss-abort")
    report.add("hostile_tolerations", tenant.tolerations, "tolerations the apiserver took")
    report.add("hostile_create_s", tenant.create_s, "hostile job create (webhook called) (s)")
    report.add("webhook_posts_s", [p[0] for p in tenant.posts], "direct AdmissionReview posts (s)",
               shown=str([p[0] for p in tenant.posts]))
    report.add("operator_cpu_s", {"quiet": quiet["cpu_s"], "attack": attack["cpu_s"]}, "leader CPU, quiet / attack (s)",
               shown=f"{quiet['cpu_s']} / {attack['cpu_s']}")
    report.figures.update({"targets_met": met, "flood": attack["flood"], "label_touches": tenant.touches,
                           "webhook_answers": [p[1] for p in tenant.posts], "tolerations_refused": tenant.refused,
                           "loop_lag_p99_attack_s": lag_a.p99_s, "loop_lag_over_1s_attack": lag_a.over_target,
                           "renewals_attack": lease_a.renewals, "renewals_quiet": lease_q.renewals})


async def run(args: argparse.Namespace, workdir: Path, report: Report) -> None:
    nodes = max(4, (args.jobs + 2 * args.probes) * (args.workers + 1) // 100 + 2)
    with SimulatedCluster(nodes=nodes) as cluster:
        kube = await KubeClient.connect(str(cluster.kubeconfig), qps=0, burst=256)
        operator: BenchOperator | None = None
        try:
            operator, health_port = await start(args, cluster, kube, workdir)
            health = HealthPoller(health_port)
            async with Tracker(kube, NAMESPACE, pods=False) as tracker:
                bench = Run(args, kube, operator, health, tracker, workdir)
                health.start()
                watchers = [asyncio.create_task(bench.lease.run()), asyncio.create_task(bench.rss.run())]
                try:
                    quiet = await bench.window("quiet", attack=False)
                    attack = await bench.window("attack", attack=True)
                finally:
                    health.stop()
                    for task in watchers:
                        task.cancel()
                    await asyncio.gather(*watchers, return_exceptions=True)
            rss = figures.rss(bench.rss.samples, attack["start"])
            report.figures["rss_hwm_mb"] = round(bench.rss.peak_hwm, 1)  # the process's whole life, its start too
            exit_code = None if operator.running() else operator.process.returncode if operator.process else None
            summarize(report, quiet, attack, rss, exit_code)
            report.figures.update({"jobs": args.jobs, "workers": args.workers, "tainted_nodes": args.tainted_nodes,
                                   "flood_seconds": args.flood_seconds, "header_kb": args.header_kb,
                                   "attacks": sorted(args.attacks),
                                   "operator_source": str(args.operator_source or "this checkout")})
        finally:
            if operator is not None:
                operator.stop()
            await kube.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--attacks", type=lambda text: set(filter(None, text.split(","))), default={"flood", "tenant"},
        help="which attacks run in the attack window: flood, tenant, caches, templates (bench/hostile_caches.py), or "
             "webhook (bench/hostile_webhook.py) in place of flood (default flood,tenant)")
    add("--webhook-arg", action="append", default=[], help="a bench.hostile_webhook flag, e.g. --bomb-connections=50")
    add("--quick", action="store_true", help="20 jobs, 100 tainted nodes, 5,000 tolerations, a 10 s flood")
    add("--jobs", type=int, default=100, help="jobs Running through both windows (default 100)")
    add("--workers", type=int, default=2, help="workers per job and per probe job (default 2)")
    add("--flood-seconds", type=float, default=20.0, help="each window's length (default 20)")
    add("--after-seconds", type=float, default=5.0, help="watched after each window (default 5)")
    add("--concurrency", type=int, default=32, help="flood requests in flight (default 32)")
    add("--header-kb", type=float, default=480.0, help="KiB of headers per flood request (default 480)")
    add("--slow-connections", type=int, default=256, help="connections that never finish their headers (256)")
    add("--budget-mb", type=float, default=2500.0, help="MiB of headers the flood sends at most (default 2500)")
    add("--rss-abort", type=float, default=2048.0, help="stop the flood once the leader's RSS passes this (MB)")
    add("--tainted-nodes", type=int, default=300, help="plain 8-GPU nodes with two taints (default 300)")
    add("--tolerations", type=int, default=20000, help="the hostile job's tolerations (halved if refused)")
    add("--touch-seconds", type=float, default=0.5, help="a tainted node's label changed this often (0.5)")
    add("--webhook-posts", type=int, default=3, help="direct AdmissionReview posts to the webhook (default 3)")
    add("--webhook-timeout", type=float, default=60.0, help="seconds a direct post waits at most (default 60)")
    add("--probes", type=int, default=3, help="new jobs timed to first status in each window (default 3)")
    add("--probe-timeout", type=float, default=120.0, help="seconds a probe waits for its status (default 120)")
    add("--operator-source", type=Path, help="run this checkout's mpiop (a git worktree) instead of this one's")
    add("--operator-arg", action="append", default=[], help="an extra `mpiop run` flag (repeatable)")
    hostile_caches.add_arguments(add)
    add("--keep-logs", type=Path, help="keep the operator's and the flood's logs in this directory")
    args = parser.parse_args(argv)
    if not args.attacks or not args.attacks <= {"flood", "tenant", "caches", "templates", "webhook"} \
            or {"flood", "webhook"} <= args.attacks:
        parser.error("--attacks: a comma-separated subset of flood,tenant,caches,templates,webhook (flood or "
                     f"webhook), not {','.join(sorted(args.attacks))}")
    if args.quick:
        args.jobs, args.tainted_nodes, args.tolerations = 20, 100, 5000
        args.flood_seconds = min(args.flood_seconds, 10.0)
    if args.operator_source is not None:
        args.operator_source = args.operator_source.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = Report()
    load_start, started = load(), time.monotonic()
    log(f"load average {load_start}")
    if args.keep_logs is not None:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, args.keep_logs, report))
    else:
        with tempfile.TemporaryDirectory(prefix="mpiop-hostile-") as tmp:
            asyncio.run(run(args, Path(tmp), report))
    report.figures.update({"load_start": load_start, "load_end": load(),
                           "bench_seconds": round(time.monotonic() - started, 1)})
    print(report.table())
    print(json.dumps(report.figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
