"""Graceful stops on the real node: jobs that checkpoint to a hostPath directory when mpiop stops them, and the
scenario that suspends one at 30 % or later, resumes it, evicts a worker at 60 % or later, and checks that each
next run starts from its checkpoint (e2e/test_graceful_stop.py).

The scripts (e2e/images/train_checkpoint.py, mpi_checkpoint.py, hold-ranks.sh and mpiop/progress_client.py) reach
the pods in a ConfigMap, as train_ddp.py does: the MPI image is not rebuilt for them.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devcluster.pi_job import pi_job
from mpiop.api.raw import JSON
from mpiop.names import STOP_GRACE_ANNOTATION
from mpiop.policies.graceful_stop import (
    DISRUPTED,
    GRACE_EXPIRED,
    GRACEFUL_STOP_EVENT,
    LAUNCHER_ENDED,
    STOPPING,
    SUSPENDED,
)
from testkit.e2e.kube import MPIJOBS, PODS, condition, is_true, wait_for
from testkit.e2e.session import E2E

ASSETS = Path(__file__).resolve().parents[2] / "e2e" / "images"
PROGRESS_CLIENT = ASSETS.parents[1] / "mpiop" / "progress_client.py"
SCRIPTS = ("train_checkpoint.py", "mpi_checkpoint.py", "hold-ranks.sh")
MOUNT, CHECKPOINTS = "/opt/train", "/checkpoint"
GRACE = 25  # the stop grace: below the pods' terminationGracePeriodSeconds (30 unset), so not capped
# Open MPI's daemons SIGKILL the ranks this long after SIGTERM (default 1 s: no time to save). Not more than the
# checkpoint needs: with 20, mpirun outlived the 25 s grace though the ranks had saved and exited (GraceExpired).
SIGKILL_AFTER = 8
# Under exec launch, mpirun.openmpi has outlived the grace after an eviction though every rank had saved on the stop
# notice and the next run resumed from it (1 run in ~10, stop 67's CI): its teardown of the `kubectl exec` streams,
# not mpiop's stop. There the stop may also end by the grace; the checkpoint assertions still hold.
EXEC_LAUNCH_ENDINGS = frozenset({LAUNCHER_ENDED, GRACE_EXPIRED})
OPENMPI_STOP_ARGS = ("--mca", "odls_base_sigkill_timeout", str(SIGKILL_AFTER))
HOLD = ["sh", f"{MOUNT}/hold-ranks.sh"]
TOOK = re.compile(r" in (\d+)s: ")


def config_map() -> JSON:
    data = {name: (ASSETS / name).read_text() for name in SCRIPTS}
    data["progress_client.py"] = PROGRESS_CLIENT.read_text()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stop-scripts"}, "data": data}


@contextlib.contextmanager
def checkpoint_dir(e2e: E2E) -> Iterator[Path]:
    """A directory on the node (the pods' hostPath volume) that outlives every pod of the job; removed afterwards.
    Writable by any UID: the exec-launch pods run as one in no /etc/passwd."""
    assert e2e.node.workdir is not None
    path = e2e.node.workdir / "checkpoints" / e2e.ns
    path.mkdir(parents=True)
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def with_scripts(manifest: JSON, host_dir: Path, worker_command: list[str]) -> JSON:
    """Mount the scripts and the checkpoint directory in every pod; the workers run `worker_command` under
    hold-ranks.sh; a stop grace of GRACE seconds; the progress the test reads."""
    manifest["metadata"].setdefault("annotations", {})[STOP_GRACE_ANNOTATION] = str(GRACE)
    for role, replica in manifest["spec"]["mpiReplicaSpecs"].items():
        spec = replica["template"]["spec"]
        spec.setdefault("volumes", []).extend([
            {"name": "scripts", "configMap": {"name": "stop-scripts"}},
            {"name": "checkpoints", "hostPath": {"path": str(host_dir), "type": "Directory"}}])
        main = spec["containers"][0]
        main.setdefault("volumeMounts", []).extend([{"name": "scripts", "mountPath": MOUNT},
                                                    {"name": "checkpoints", "mountPath": CHECKPOINTS}])
        main.setdefault("env", []).append({"name": "CHECKPOINT_DIR", "value": CHECKPOINTS})
        if role == "Worker":
            main["command"] = [*HOLD, *worker_command]
    return manifest


def ddp_stop_job(name: str, image: str, host_dir: Path, mpirun: tuple[str, ...],
                 worker_command: tuple[str, ...] = ("/usr/local/bin/mpi-sshd",),
                 shape: Callable[[JSON], JSON] = lambda manifest: manifest) -> JSON:
    """train_checkpoint.py on 2 workers x 2 slots under Open MPI, its daemons told to wait before SIGKILL;
    `shape` (e.g. exec_launch.restricted_exec) applies before the scripts are mounted."""
    command = [*mpirun, *OPENMPI_STOP_ARGS, "-n", "4", "python3", f"{MOUNT}/train_checkpoint.py"]
    manifest = shape(pi_job(name, image, launcher_command=command, runPolicy={"backoffLimit": 0}))
    return with_scripts(manifest, host_dir, list(worker_command))


def intel_stop_job(name: str, image: str, host_dir: Path) -> JSON:
    """mpi_checkpoint.py on 4 Intel MPI ranks (Hydra over SSH), test_intel_mpi_pi's shape."""
    script = ("timeout 120 sh -c 'until getent -s dns hosts \"$(hostname -f)\" >/dev/null; do sleep 0.5; done'; "
              f"exec mpiexec.hydra -n 4 python3 {MOUNT}/mpi_checkpoint.py")
    manifest = pi_job(name, image, implementation="Intel", launcher_command=["sh", "-c", script],
                      worker_readiness_probe=True, launcherCreationPolicy="WaitForWorkersReady",
                      runPolicy={"backoffLimit": 0})
    return with_scripts(manifest, host_dir, ["/usr/local/bin/mpi-sshd"])


@dataclass
class Stop:
    """One graceful stop as the test saw it."""

    kind: str  # "suspend" or "eviction"
    at_percent: int  # the progress when the test stopped the job
    checkpoint: JSON = field(default_factory=dict)  # checkpoint.json after the stop
    took: int = -1  # seconds, from the GracefulStop Event (Stopping's start to the launcher's end)
    result: str = ""  # Stopping=False's reason: LauncherEnded or GraceExpired
    wall: float = 0.0  # seconds from the test's action to Stopping=False, as the test saw it
    resumed_percent: int = -1  # the next run's first progress seen in status.trainerStatus

    def line(self) -> str:
        return (f"{self.kind}: stopped at {self.at_percent}%, checkpoint step {self.checkpoint.get('step')} "
                f"({self.checkpoint.get('percent')}%, on {self.checkpoint.get('why')}); stop took {self.took}s "
                f"({self.result}; {self.wall:.1f}s from the test's action); the next run's first report "
                f"{self.resumed_percent}%")


def progress(job: JSON | None) -> tuple[int, str]:
    """(progressPercentage, the reporting run's id) from status.trainerStatus; (-1, "") before any report."""
    report = ((job or {}).get("status") or {}).get("trainerStatus") or {}
    metrics = {m["name"]: m["value"] for m in report.get("metrics") or []}
    return int(report.get("progressPercentage", -1)), str(metrics.get("run", ""))


def wait_progress(e2e: E2E, name: str, at_least: int, not_run: str = "") -> tuple[int, str]:
    """The first report of a run other than `not_run` at `at_least` % or more."""
    def probe() -> tuple[int, str] | None:
        percent, run = progress(e2e.job(name))
        return (percent, run) if run and run != not_run and percent >= at_least else None

    return wait_for(probe, 300, f"{name} to report {at_least}% (a run other than {not_run!r})",
                    describe=lambda: e2e.describe(name))


def first_report_of_new_run(e2e: E2E, name: str, old_run: str) -> tuple[int, str]:
    """The first progress of a run other than `old_run` that status.trainerStatus shows."""
    return wait_progress(e2e, name, 0, old_run)


def graceful_stops(e2e: E2E) -> list[str]:
    return [e.get("message", "") for e in e2e.api.events(e2e.ns) if e.get("reason") == GRACEFUL_STOP_EVENT]


def stopped(e2e: E2E, name: str, stop: Stop, reason: str, before: list[str], since: float) -> None:
    """Wait for a GracefulStop Event of `reason` not in `before`, then Stopping=False; fill in `stop`."""
    def new() -> str | None:
        return next((m for m in graceful_stops(e2e) if m not in before and f"({reason})" in m), None)

    message = wait_for(new, 120, f"{name}'s GracefulStop Event ({reason})", describe=lambda: e2e.describe(name))
    stop.wall = time.monotonic() - since
    took = TOOK.search(message)
    assert took, message
    stop.took = int(took.group(1))
    job = wait_for(lambda: (j := e2e.job(name)) and (condition(j, STOPPING) or {}).get("status") == "False" and j,
                   60, "Stopping=False", describe=lambda: e2e.describe(name))
    stop.result = (condition(job, STOPPING) or {}).get("reason", "")


def read_checkpoint(host_dir: Path) -> JSON:
    summary: JSON = json.loads((host_dir / "checkpoint.json").read_text())
    return summary


def suspend_resume_evict(e2e: E2E, name: str, manifest: JSON, host_dir: Path,
                         endings: frozenset[str] = frozenset({LAUNCHER_ENDED})) -> tuple[list[Stop], str]:
    """Run `manifest`; suspend it at >= 30 %, resume; evict worker 1 at >= 60 %; run to the end. Returns both stops
    and the last launcher's log; asserts each stop ended as `endings` allow (by default with the launcher: the ranks
    saved in time), the ranks saved on the stop, the checkpoint is where the job was stopped, and the next run's
    first report is at the checkpoint, not back at 0."""
    e2e.api.create(f"/api/v1/namespaces/{e2e.ns}/configmaps", config_map())
    e2e.create_job(manifest)
    path = f"{MPIJOBS.format(ns=e2e.ns)}/{name}"
    stops: list[Stop] = []

    percent, first_run = wait_progress(e2e, name, 30)
    suspend = Stop("suspend", percent)
    since = time.monotonic()
    e2e.api.merge_patch(path, {"spec": {"runPolicy": {"suspend": True}}})
    stopped(e2e, name, suspend, SUSPENDED, [], since)
    wait_for(lambda: is_true(e2e.job(name), "Suspended") and not e2e.api.pods(e2e.ns), 120,
             "the job Suspended, its pods gone", describe=lambda: e2e.describe(name))
    suspend.checkpoint = read_checkpoint(host_dir)
    stops.append(suspend)
    e2e.api.merge_patch(path, {"spec": {"runPolicy": {"suspend": False}}})
    suspend.resumed_percent, _ = first_report_of_new_run(e2e, name, first_run)

    percent, run = wait_progress(e2e, name, 60, first_run)
    eviction = Stop("eviction", percent)
    worker = f"{name}-worker-1"
    before, since = graceful_stops(e2e), time.monotonic()
    e2e.api.create(f"{PODS.format(ns=e2e.ns)}/{worker}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": worker, "namespace": e2e.ns}})
    stopped(e2e, name, eviction, DISRUPTED, before, since)
    eviction.checkpoint = read_checkpoint(host_dir)
    stops.append(eviction)
    eviction.resumed_percent, run = first_report_of_new_run(e2e, name, run)

    job = e2e.wait_finished(name, timeout=300)
    log = e2e.launcher_log(name)
    conditions = "\n".join(f"{c['type']}={c['status']} {c.get('reason')}: {c.get('message', '')}"
                           for c in (job.get("status") or {}).get("conditions") or [])
    assert is_true(job, "Succeeded"), f"{conditions}\n{log}"
    assert (job.get("status") or {}).get("disruptionRestarts") == 1, job.get("status")
    messages = graceful_stops(e2e)
    print("GracefulStop Events:\n  " + "\n  ".join(messages))
    assert len(messages) == 2, messages  # one per stop
    for stop in stops:
        assert stop.result in endings, stop.line()
        assert stop.checkpoint["why"] in ("stop notice", "SIGTERM"), stop.line()
        assert stop.checkpoint["percent"] >= stop.at_percent, stop.line()
        assert stop.resumed_percent >= stop.checkpoint["percent"] > 0, stop.line()
    step = stops[-1].checkpoint["step"]
    resumed = re.findall(rf"^rank (\d)/4 on \S+ resumed from step {step} ", log, re.M)
    assert sorted(resumed) == ["0", "1", "2", "3"], log
    first = re.search(r"^rank 0/4 first report (\d+)% \(step (\d+)", log, re.M)
    assert first and int(first.group(1)) >= stops[-1].checkpoint["percent"] and int(first.group(2)) == step, log
    return stops, log
