"""mpiop.status.failure_report: whom a failed attempt is blamed on, its ranks and node, and the log tail."""

from __future__ import annotations

import pytest

from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Observed
from mpiop.status.failure_report import LogRequest, bound_tail, log_request, report
from testkit.mpijobs import make_mpijob
from testkit.pods import PodBuilder, make_pod

JOB = make_mpijob("pi", "ns").workers(3).slots(2).obj()


def launcher(job: MPIJob = JOB) -> PodBuilder:
    return make_pod(job, "launcher").on_node("n0")


def worker(index: int, job: MPIJob = JOB) -> PodBuilder:
    return make_pod(job, "worker", index).on_node(f"n{index + 1}")


def observed(*pods: PodBuilder, tail: str = "", of: str = "pi-launcher") -> Observed:
    found = Observed(pods=[p.obj() for p in pods])
    if tail:
        found.log_tails[of] = tail
    return found


ORTE_LOST = """\
--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[41012,0],0] on node pi-launcher
  Remote daemon: [[41012,0],2] on node pi-worker-1.pi.ns.svc

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------"""
PRTE_LOST = ORTE_LOST.replace("ORTE", "PRTE").replace("pi-worker-1.pi.ns.svc", "pi-worker-2")
NOTICED = ("mpirun noticed that process rank 1 with PID 0 on node pi-worker-0 exited on signal 9 (Killed).\n"
           "--------------------------------------------------------------------------")
HYDRA = """\
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 5 PID 57 RUNNING AT pi-worker-2
=   KILLED BY SIGNAL: 9 (Killed)
==================================================================================="""
RUNC_NO_SHELL = ('OCI runtime exec failed: exec failed: unable to start container process: exec: "/bin/sh": stat '
                 '/bin/sh: no such file or directory: unknown command terminated with exit code 126 ')
KUBEXEC_NO_SHELL = (
    "kubexec.sh: pod pi-worker-1 cannot run /bin/sh (container worker): exec launch starts every remote command "
    f"with /bin/sh -c, so the image needs one; the runtime said: {RUNC_NO_SHELL}\n"
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.")
PROCESS_NAME = """\
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[51934,1],3]
  Exit code:    3"""


@pytest.mark.parametrize(
    ("pods", "tail", "pod", "reason", "what"),
    [
        ([launcher().failed(exit_code=1), worker(0).running(), worker(1).running()], "", "pi-launcher", "Error",
         "pi-launcher (node n0) container main Error exit 1"),
        ([launcher().failed(exit_code=1), worker(0).running(), worker(1).failed(reason="OOMKilled", exit_code=137)],
         "", "pi-worker-1", "OOMKilled",
         "pi-worker-1 (ranks 2-3, node n2) container main OOMKilled exit 137; "
         "then the launcher pi-launcher (node n0) container main Error exit 1"),
        ([launcher().failed(exit_code=137), worker(0).running(), worker(2).restarted()], "", "pi-worker-2",
         "OOMKilled", "pi-worker-2 (ranks 4-5, node n3) container main OOMKilled exit 137; "
                      "then the launcher pi-launcher (node n0) container main Error exit 137"),
        ([launcher().failed(exit_code=1), worker(0).running(), worker(1).running()], ORTE_LOST, "pi-worker-1",
         "WorkerLost", "worker pi-worker-1 (ranks 2-3, node n2), per the launcher's log: Remote daemon: [[41012,0],2] "
                       "on node pi-worker-1.pi.ns.svc; then the launcher pi-launcher (node n0) container main Error "
                       "exit 1"),
        ([launcher().failed(exit_code=1), worker(2).running()], PRTE_LOST, "pi-worker-2", "WorkerLost", None),
        ([launcher().failed(exit_code=137), worker(0).running()], NOTICED, "pi-worker-0", "RankFailed",
         "worker pi-worker-0 (ranks 0-1, node n1), per the launcher's log: mpirun noticed that process rank 1 with "
         "PID 0 on node pi-worker-0 exited on signal 9 (Killed).; then the launcher pi-launcher (node n0) container "
         "main Error exit 137"),
        ([launcher().failed(exit_code=9), worker(2).running()], HYDRA, "pi-worker-2", "RankFailed", None),
        ([launcher().failed(exit_code=3), worker(1).running()], PROCESS_NAME, "pi-worker-1", "RankFailed", None),
        ([launcher().failed(exit_code=1), worker(0).running(), worker(1).running()], KUBEXEC_NO_SHELL,
         "pi-worker-1", "NoShell",
         "worker pi-worker-1 (ranks 2-3, node n2), per the launcher's log: "
         f"{KUBEXEC_NO_SHELL.splitlines()[0][:300]}; then the launcher pi-launcher (node n0) container main Error "
         "exit 1"),
        ([launcher().failed(exit_code=1), worker(0).running()], "Primary job terminated normally", "pi-launcher",
         "Error", None),
        ([launcher().failed(reason="StartError", exit_code=128, message=(
            'failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create '
            'failed: unable to start container process: exec: "mpirunx": executable file not found in $PATH'))],
         "", "pi-launcher", "StartError",
         'pi-launcher (node n0) container main StartError exit 128: failed to create containerd task: failed to '
         'create shim task: OCI runtime create failed: runc create failed: unable to start container process: '
         'exec: "mpirunx": executable file not found in $PATH'),
        ([launcher().running(), worker(0).running(), worker(1).failed(exit_code=255)], "", "pi-worker-1", "Error",
         "pi-worker-1 (ranks 2-3, node n2) container main Error exit 255"),
        ([launcher().running(), worker(1).evicted("The node was low on resource: memory.")], "", "pi-worker-1",
         "Evicted", "pi-worker-1 (ranks 2-3, node n2) Evicted: The node was low on resource: memory."),
    ],
    ids=["launcher-alone", "worker-oomkilled-then-launcher", "worker-restarted-in-place", "orte-lost-daemon",
         "prte-lost-daemon", "mpirun-noticed-rank", "hydra-bad-termination", "process-name-rank",
         "exec-worker-without-shell", "launcher-log-names-nobody", "malformed-command", "worker-alone",
         "worker-evicted"],
)
def test_who_is_blamed(pods: list[PodBuilder], tail: str, pod: str, reason: str, what: str | None) -> None:
    found = report(JOB, observed(*pods, tail=tail), 0)
    assert found is not None
    assert (found.pod, found.reason, found.info.pod, found.info.reason) == (pod, reason, pod, reason)
    if what is not None:
        assert found.what == what
    assert found.tail == tail


def test_failure_info_fields() -> None:
    found = report(JOB, observed(launcher().failed(), worker(1).failed(reason="OOMKilled", exit_code=137)), 0)
    assert found is not None
    assert found.info.model_dump(exclude_none=True) == {
        "reason": "OOMKilled", "pod": "pi-worker-1", "container": "main", "exit_code": 137, "node": "n2",
        "ranks": "2-3", "attempt": 0}


@pytest.mark.parametrize(
    ("pods", "tail", "pod", "what"),
    [
        ([launcher().failed(exit_code=255), worker(0).running()], PRTE_LOST, "pi-worker-2",
         "worker pi-worker-2 (ranks 4-5, gone), per the launcher's log: Remote daemon: [[41012,0],2] on node "
         "pi-worker-2; then the launcher pi-launcher (node n0) container main Error exit 255"),
        ([launcher().failed(exit_code=137)], NOTICED, "pi-worker-0",
         "worker pi-worker-0 (ranks 0-1, gone), per the launcher's log: mpirun noticed that process rank 1 with "
         "PID 0 on node pi-worker-0 exited on signal 9 (Killed).; then the launcher pi-launcher (node n0) container "
         "main Error exit 137"),
        ([launcher().failed(exit_code=1)], ORTE_LOST.replace("pi-worker-1", "pi-worker-7"), "pi-launcher", None),
    ],
    ids=["deleted-worker-not-yet-made-again", "rank-of-a-gone-worker", "host-past-the-replicas"],
)
def test_a_worker_the_log_names_is_blamed_though_its_pod_is_gone(pods: list[PodBuilder], tail: str, pod: str,
                                                                   what: str | None) -> None:
    """Deleted under the launcher, the worker may be gone from the cache (and not made again yet) when the
    launcher's failure is seen: mpirun's log still names it, and it is blamed, with its ranks, not its node."""
    found = report(JOB, observed(*pods, tail=tail), 0)
    assert found is not None
    assert (found.pod, found.info.pod) == (pod, pod)
    if what is not None:
        assert found.what == what
        assert found.info.ranks is not None and found.info.node is None


def test_a_lost_worker_not_of_this_attempt_is_not_blamed() -> None:
    job = make_mpijob("pi", "ns").workers(2).status(restart_count=1).obj()
    pods = [make_pod(job, "launcher", 0, 1).failed(), make_pod(job, "worker", 1, 0).running()]
    found = report(job, observed(*pods, tail=ORTE_LOST, of="pi-launcher-1"), 1)
    assert found is not None
    assert found.pod == "pi-launcher-1"


@pytest.mark.parametrize(
    ("pods", "wanted"),
    [
        ([launcher().failed(), worker(1).failed(reason="OOMKilled", exit_code=137)],
         LogRequest("pi-launcher", "main", False)),
        ([launcher().running(), worker(1).failed("mpi", exit_code=2)], LogRequest("pi-worker-1", "mpi", False)),
        ([launcher().running(), worker(0).evicted()], None),
        ([launcher().running(), worker(0).running()], None),
        ([launcher().failed().terminating()], None),
    ],
    ids=["launcher-failed", "worker-failed", "evicted-no-container", "nothing-failed", "deleted-by-us"],
)
def test_log_request(pods: list[PodBuilder], wanted: LogRequest | None) -> None:
    assert log_request(JOB, observed(*pods), 0) == wanted


def test_log_request_previous_when_the_container_restarted() -> None:
    job = make_mpijob("pi").workers(1).obj()
    pod = make_pod(job, "worker", 0).restarted().obj()
    pod["status"]["phase"] = "Failed"  # e.g. evicted after an in-place restart
    assert log_request(job, Observed(pods=[pod]), 0) == LogRequest("pi-worker-0", "main", True)


def test_bound_tail_keeps_the_last_lines_and_bytes() -> None:
    lines = [f"line {i}" for i in range(100)]
    assert bound_tail("\n".join(lines) + "\n\n").splitlines() == lines[-20:]
    long = "\n".join("x" * 200 + f" {i}" for i in range(20))
    bounded = bound_tail(long)
    assert len(bounded.encode()) <= 2048 and bounded.endswith(" 19")
    assert bounded.splitlines()[0].startswith("x"), "cut at a line boundary"
    assert bound_tail(b"\x1b[31mred\x1b[0m\r\nbell\x07 \xff\n") == "red\nbell\\x07 \ufffd"  # colours dropped, BEL shown


def test_message_within_the_event_limit_keeps_the_end_of_the_tail() -> None:
    tail = "\n".join(f"rank {i}: some long diagnostic line from the program" for i in range(20))
    found = report(JOB, observed(launcher().failed(), tail=tail), 0)
    assert found is not None
    full = found.message("MPIJob ns/pi is restarting (restart 1 of backoffLimit 6)")
    assert full.endswith(tail) and "\nLast lines of pi-launcher/main:\n" in full
    short = found.message("MPIJob ns/pi is restarting (restart 1 of backoffLimit 6)", limit=1024)
    assert len(short) <= 1024
    assert short.startswith("MPIJob ns/pi is restarting (restart 1 of backoffLimit 6): pi-launcher (node n0)")
    assert short.endswith("rank 19: some long diagnostic line from the program")


def test_no_failure_no_report() -> None:
    assert report(JOB, observed(launcher().running(), worker(0).running()), 0) is None


def test_kubexecs_finding_in_the_launchers_termination_message_names_the_worker() -> None:
    """mpirun's help texts push kubexec.sh's line out of the log's last lines; its termination message keeps it."""
    line = KUBEXEC_NO_SHELL.splitlines()[0]
    pods = [launcher().failed(exit_code=127, message=line + "\n"), worker(0).running(), worker(1).running()]
    found = report(JOB, observed(*pods, tail=ORTE_LOST.replace("Remote daemon", "target node")), 0)
    assert found is not None
    assert (found.pod, found.reason) == ("pi-worker-1", "NoShell")
    assert found.what == (f"worker pi-worker-1 (ranks 2-3, node n2), per the launcher's log: {line[:300]}; "
                          "then the launcher pi-launcher (node n0) container main Error exit 127")  # said once


def test_a_wrapped_help_text_still_names_the_worker() -> None:
    tail = ("mpirun has exited due to process rank 3 with PID 0 on\nnode pi-worker-1 exiting improperly. There are "
            "three reasons this could occur:")
    found = report(JOB, observed(launcher().failed(), worker(1).running(), tail=tail), 0)
    assert found is not None
    assert (found.pod, found.reason) == ("pi-worker-1", "RankFailed")
    assert "per the launcher's log: mpirun has exited due to process rank 3 with PID 0 on node pi-worker-1 " \
           "exiting improperly." in found.what


def test_the_first_worker_named_is_blamed() -> None:
    tail = f"{NOTICED.replace('pi-worker-0', 'pi-worker-2')}\n{ORTE_LOST}"
    found = report(JOB, observed(launcher().failed(), worker(1).running(), worker(2).running(), tail=tail), 0)
    assert found is not None and found.pod == "pi-worker-2"


@pytest.mark.parametrize(("pods", "shown"), [
    ([launcher().running(), worker(1).failed(exit_code=1, message="boom \x1b]0;pwned\x07\u202e")],
     "pi-worker-1 (ranks 2-3, node n2) container main Error exit 1: boom \\x1b]0;pwned\\x07\\u202e"),
    ([launcher().running(), worker(1).evicted("low on \x1b[2Jmemory\nFAKE: line")],
     "pi-worker-1 (ranks 2-3, node n2) Evicted: low on \\x1b[2Jmemory\\nFAKE: line"),
    ([launcher().failed(exit_code=1, message="kubexec.sh: pod pi-worker-1 cannot run /bin/sh \x1b[2J\n"),
      worker(1).running()],
     "worker pi-worker-1 (ranks 2-3, node n2), per the launcher's log: kubexec.sh: pod pi-worker-1 cannot run "
     "/bin/sh \\x1b[2J; then the launcher pi-launcher (node n0) container main Error exit 1"),
], ids=["termination-message", "kubelet-message", "launcher-termination-message"])
def test_what_a_container_wrote_is_told_escaped_on_one_line(pods: list[PodBuilder], shown: str) -> None:
    """A termination message is the container's to write: the report (a condition, an Event, `kubectl mpijob
    status`) shows its control characters escaped and its line breaks as \\n, never raw."""
    found = report(JOB, observed(*pods), 0)
    assert found is not None and found.what == shown
