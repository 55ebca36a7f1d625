"""Time to first and last rank on the real node (`make bench-node`, root): a 2-worker Open MPI pi job through a
real `mpiop run`, and the seconds from its `create` to each milestone, median (min-max) of `--runs` runs after one
warm-up run. `--suite mpi-trixie` runs it on trixie's image (Open MPI 5, PRRTE's prterun) instead of bookworm's
(Open MPI 4.1). `--launch exec` starts the ranks through the Kubernetes exec API instead of SSH, in the shape the
exec e2e runs (testkit.e2e.exec_launch): the image without OpenSSH, an arbitrary UID, read-only root filesystems,
a restricted namespace, the workers on mpiop's default command (they wait), the operator given the e2e's kubectl
image. The headline, in both modes: launcher started -> all ranks, and mpirun started -> all ranks.

Where each milestone comes from (one machine, one clock):
- pods created / scheduled / containers started: a watch on the namespace's pods, the moment the last of the
  job's pods was first seen created, with a node, with every container running (the API's own
  creationTimestamp, PodScheduled and startedAt are whole seconds, too coarse for a 3 s target);
- workers Running (exec): the same watch, the last worker's phase Running: what kubexec.sh waits for;
- DNS resolvable / sshd accepting (ssh): the job's own script, which probes every worker's hostfile name from
  the launcher and from the other workers every 20 ms and prints when it resolves and when port 2222 accepts
  (a host's time is its first observer's; the milestone is the last host's);
- launcher started, mpirun started, first rank, all ranks: timestamps the launcher and each rank print;
- Succeeded: a watch on the MPIJob.

What the launcher waits for before mpirun: under SSH, `mpi-wait-hosts` (every worker's name resolving and its
sshd accepting, as the e2e jobs do); under exec, nothing: mpirun starts at once, and kubexec.sh, mpirun's agent,
waits for each worker pod's phase Running (`kubectl get pod`, every 1 s) before its `kubectl exec`.

Not part of `make bench` (which needs no root). Wrap it in `flock /tmp/mpiop-bench.lock`; the node itself
queues behind any other e2e node on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from devcluster import images
from devcluster.pi_job import SAMPLES, pi_job
from mpiop.api.raw import JSON
from testkit.e2e.exec_launch import exec_pi_job, import_exec_images, restrict_namespace
from testkit.e2e.kube import MPIJOBS, PODS, is_true, wait_for
from testkit.e2e.session import E2E, fresh_namespace, node_session, operator_process

LAUNCHES = ("ssh", "exec")
WORKERS = 2
RANKS = 4  # 2 workers x 2 slots
MILESTONES = {
    "ssh": ("pods created", "pods scheduled", "containers started", "DNS resolvable", "sshd accepting",
            "launcher started", "mpirun started", "first rank", "all ranks", "Succeeded"),
    "exec": ("pods created", "pods scheduled", "workers Running", "containers started", "launcher started",
             "mpirun started", "first rank", "all ranks", "Succeeded"),
}
# The headline figures, each (from, to): both ends are stamps the job printed, so no watch latency is in them.
INTERVALS = (("launcher started", "all ranks"), ("mpirun started", "all ranks"))
STAMP = 'stamp() { echo "ttfr $1 $(date +%s.%N)"; }\n'
PROBE = STAMP + r"""probe() {
  until getent hosts "$1" >/dev/null; do sleep 0.02; done; echo "ttfr dns $1 $(date +%s.%N)"
  until (exec 3<>"/dev/tcp/$1/2222") 2>/dev/null; do sleep 0.02; done; echo "ttfr sshd $1 $(date +%s.%N)"
}
"""
RANK = f'echo "ttfr rank $OMPI_COMM_WORLD_RANK $(date +%s.%N)"; exec /usr/local/bin/pi-openmpi {SAMPLES}'
HOSTS = """$(awk 'NF && $1 !~ /^#/ {split($1, a, ":"); print a[1]}' /etc/mpi/hostfile)"""


WAIT = "mpi-wait-hosts true"
# --trace-wait: every step of the launcher's wait, timestamped, in its log (printed for a run whose wait was slow).
TRACED_WAIT = "PS4='+ $(date +%s.%N) ' bash -x \"$(command -v mpi-wait-hosts)\" true"


def launcher_script(wait: str = WAIT) -> str:
    """The SSH launcher (bash): stamp its start, probe every host in the background, wait as the e2e jobs do,
    run pi with each rank stamping its start."""
    return (PROBE + f"stamp launcher\nfor h in {HOSTS}; do probe \"$h\" & done\n{wait}\nstamp mpirun\n"
            f"exec mpirun.openmpi --allow-run-as-root -n {RANKS} sh -c '{RANK}'\n")


def exec_launcher_script() -> str:
    """The exec launcher (POSIX sh, as any UID): stamp its start, then mpirun at once (kubexec.sh waits for each
    worker pod to run), each rank stamping its start."""
    return STAMP + f"stamp launcher\nstamp mpirun\nexec mpirun.openmpi -n {RANKS} sh -c '{RANK}'\n"


def ttfr_job(name: str, ns: str, image: str, workers: int = WORKERS, wait: str = WAIT) -> JSON:
    """The SSH job: root, the image with sshd, each worker probing the others before its sshd starts."""
    manifest = pi_job(name, image, workers=workers, launcher_command=["bash", "-c", launcher_script(wait)])
    manifest["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}  # the workers' logs are read after Succeeded
    hosts = [f"{name}-worker-{i}.{name}.{ns}.svc" for i in range(workers)]
    template = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    # Each worker probes the others; which is which is known only inside the pod (its hostname).
    template["spec"]["containers"][0]["command"] = [
        "bash", "-c", PROBE + 'for h in ' + " ".join(hosts) + '; do [ "${h%%.*}" = "$(hostname)" ] || '
        'probe "$h" & done\nexec /usr/local/bin/mpi-sshd\n']
    return manifest


def exec_job(name: str, image: str) -> JSON:
    """The exec job, in the restricted shape of the exec e2e; a failed run fails the bench (no restart)."""
    return exec_pi_job(name, image, exec_launcher_script(), runPolicy={"backoffLimit": 0})


@dataclass
class Watch:
    """A watch on one collection, in a thread: `seen(obj, now)` for each event, now being time.time()."""

    e2e: E2E
    path: str
    seen: Callable[[JSON, float], None]
    stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            req = urllib.request.Request(f"{self.e2e.api.server}{self.path}?watch=1&timeoutSeconds=60",
                                         headers={"Accept": "application/json"})
            try:
                with urllib.request.urlopen(req, context=self.e2e.api.context, timeout=70) as resp:
                    for line in resp:
                        if self.stopped.is_set():
                            return
                        self.seen(json.loads(line)["object"], time.time())
            except OSError:
                time.sleep(0.1)


def _all_containers_running(pod: JSON) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) or "terminated" in s.get("state", {})
                                  for s in statuses)


def one_run(e2e: E2E, name: str, launch: str, manifest: JSON) -> dict[str, float]:
    """Create the job, watch it to Succeeded, and return each milestone's seconds after the create."""
    pods: dict[str, dict[str, float]] = {}
    succeeded: list[float] = []
    lock = threading.Lock()

    def pod_seen(pod: JSON, now: float) -> None:
        pod_name = pod["metadata"]["name"]
        if not pod_name.startswith(f"{name}-"):
            return
        with lock:
            marks = pods.setdefault(pod_name, {"created": now})
            if (pod.get("spec") or {}).get("nodeName"):
                marks.setdefault("scheduled", now)
            if _all_containers_running(pod):
                marks.setdefault("started", now)
            if (pod.get("status") or {}).get("phase") == "Running":
                marks.setdefault("running", now)

    def job_seen(job: JSON, now: float) -> None:
        if job["metadata"]["name"] == name and is_true(job, "Succeeded") and not succeeded:
            succeeded.append(now)

    watches = [Watch(e2e, PODS.format(ns=e2e.ns), pod_seen), Watch(e2e, MPIJOBS.format(ns=e2e.ns), job_seen)]
    for watch in watches:
        watch.start()
    time.sleep(0.5)  # both watches open before the create
    begin = time.time()
    e2e.api.create(MPIJOBS.format(ns=e2e.ns), manifest)
    try:
        wait_for(lambda: succeeded or is_true(e2e.job(name), "Failed"), 180, f"{name} to finish", interval=0.1,
                 describe=lambda: e2e.describe(name))
        if not succeeded:
            raise AssertionError(f"{name} failed:\n{e2e.describe(name)}\n  launcher log:\n{e2e.launcher_log(name)}")
        wait_for(lambda: len(pods) == WORKERS + 1 and all("started" in m for m in pods.values()), 10,
                 "every pod's start to be seen")
    finally:
        for watch in watches:
            watch.stopped.set()
    stamps = _stamps(e2e, name, launch)
    with lock:
        marks = {
            "pods created": max(m["created"] for m in pods.values()),
            "pods scheduled": max(m["scheduled"] for m in pods.values()),
            "containers started": max(m["started"] for m in pods.values()),
        }
        if launch == "exec":
            marks["workers Running"] = max(m["running"] for p, m in pods.items() if p.startswith(f"{name}-worker-"))
    marks.update(stamps)
    marks["Succeeded"] = succeeded[0]
    if launch == "ssh" and marks["mpirun started"] - marks["sshd accepting"] > 2:
        print(f"{name}: mpirun started {marks['mpirun started'] - marks['sshd accepting']:.1f} s after every sshd "
              f"accepted; its launcher's log:\n{e2e.launcher_log(name)}", file=sys.stderr, flush=True)
    e2e.api.delete(f"{MPIJOBS.format(ns=e2e.ns)}/{name}")
    wait_for(lambda: not [p for p in e2e.api.pods(e2e.ns) if p["metadata"]["name"].startswith(f"{name}-")], 60,
             f"{name}'s pods to go")
    return {k: round(marks[k] - begin, 3) for k in MILESTONES[launch]}


def _stamps(e2e: E2E, name: str, launch: str) -> dict[str, float]:
    lines = e2e.launcher_log(name).splitlines()
    if launch == "ssh":  # the workers' probes
        for i in range(WORKERS):
            lines += e2e.api.logs(e2e.ns, f"{name}-worker-{i}").splitlines()
    return printed_milestones(lines, launch, name=name)


def printed_milestones(lines: list[str], launch: str, workers: int = WORKERS, ranks: int = RANKS,
                       name: str = "the job") -> dict[str, float]:
    """The epochs the job's script printed (`ttfr <what> [host|rank] <epoch>`): under SSH a host resolvable or
    accepting when its first observer saw it, every host when the last one was; the first rank when the earliest
    rank started, all ranks when the last one did."""
    dns: dict[str, float] = {}
    sshd: dict[str, float] = {}
    rank_starts: dict[str, float] = {}
    found: dict[str, float] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or parts[0] != "ttfr":
            continue
        stamp = float(parts[-1])
        table = {"dns": dns, "sshd": sshd, "rank": rank_starts}.get(parts[1])
        if table is not None and len(parts) == 4:
            table[parts[2]] = min(stamp, table.get(parts[2], stamp))
        else:
            found[f"{parts[1]} started"] = stamp
    hosts_seen = launch != "ssh" or (len(dns) >= workers and len(sshd) >= workers)
    if not hosts_seen or len(rank_starts) < ranks or not {"launcher started", "mpirun started"} <= set(found):
        raise AssertionError(f"{name}: the job's script did not print every milestone ({launch} launch, {ranks} "
                             f"ranks, {len(rank_starts)} seen):\n" + "\n".join(lines))
    found["first rank"] = min(rank_starts.values())
    found["all ranks"] = max(rank_starts.values())
    if launch == "ssh":
        found["DNS resolvable"] = max(dns.values())
        found["sshd accepting"] = max(sshd.values())
    return found


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def summary(runs: list[dict[str, float]], launch: str) -> dict[str, dict[str, float]]:
    """Each milestone's median, min and max over the runs."""
    return {k: _spread([r[k] for r in runs]) for k in MILESTONES[launch]}


def intervals(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """The headline figures: each of INTERVALS, run by run, then median, min and max."""
    return {f"{a} -> {b}": _spread([r[b] - r[a] for r in runs]) for a, b in INTERVALS}


def table(figures: dict[str, dict[str, float]], title: str = "create ->") -> str:
    width = max(20, *(len(k) for k in figures))
    lines = [f"{title:<{width}} {'median s':>9} {'min':>7} {'max':>7}", "-" * (width + 26)]
    lines += [f"{k:<{width}} {v['median']:>9.3f} {v['min']:>7.3f} {v['max']:>7.3f}" for k, v in figures.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.node", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="measured runs, after one warm-up run (default 10)")
    parser.add_argument("--launch", choices=LAUNCHES, default="ssh",
                        help="how mpirun starts the ranks: ssh (sshd in the workers) or exec (the Kubernetes exec "
                             "API, in the restricted shape of e2e/test_exec_launch.py) (default ssh)")
    parser.add_argument("--trace-wait", action="store_true",
                        help="ssh: trace the launcher's wait for its hosts (bash -x, timestamped) into its log")
    parser.add_argument("--operator-arg", action="append", default=[], help="an extra flag for `mpiop run`")
    parser.add_argument("--suite", choices=sorted(images.MPI_SUITES), default=images.BOOKWORM.name,
                        help=f"the MPI image: {', '.join(images.MPI_SUITES)} (default {images.BOOKWORM.name})")
    args = parser.parse_args(argv)
    if args.trace_wait and args.launch != "ssh":
        parser.error("--trace-wait: only the SSH launcher waits for its hosts")
    if os.geteuid() != 0:
        parser.error("the node needs root (containerd, mounts, cgroups, a bridge)")
    runs: list[dict[str, float]] = []
    with node_session() as session, fresh_namespace(session, f"ttfr-{args.launch}", args.suite) as e2e:
        flags = list(args.operator_arg)
        if args.launch == "exec":
            image, kubectl_image = import_exec_images(session, args.suite)
            restrict_namespace(e2e)
            flags = ["--kubectl-image", kubectl_image, *flags]

            def manifest(name: str) -> JSON:
                return exec_job(name, image)
        else:
            wait = TRACED_WAIT if args.trace_wait else WAIT

            def manifest(name: str) -> JSON:
                return ttfr_job(name, e2e.ns, e2e.image, wait=wait)
        with operator_process(e2e, *flags):
            load_start = os.getloadavg()[0]
            for i in range(args.runs + 1):
                marks = one_run(e2e, f"ttfr-{i}", args.launch, manifest(f"ttfr-{i}"))
                print(f"run {i}{' (warm-up)' if i == 0 else ''}: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in marks.items()), file=sys.stderr, flush=True)
                if i:
                    runs.append(marks)
    figures, headline = summary(runs, args.launch), intervals(runs)
    print(f"{args.launch} launch, {args.suite}, {len(runs)} runs, load {load_start:.2f} at the start")
    print(table(figures))
    print(table(headline, "headline"))
    print(json.dumps({"phase": "node", "launch": args.launch, "suite": args.suite, "runs": len(runs),
                      "load_start": round(load_start, 2), "load": round(os.getloadavg()[0], 2), "intervals": headline,
                      "milestones": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
