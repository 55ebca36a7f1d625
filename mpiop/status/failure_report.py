"""Why an attempt failed, in the words `kubectl describe mpijob` shows: which pod, which ranks ran there, on
which node, which container, its exit code and reason, and the last lines of the log that explains it.

An MPI job's launcher fails whenever any rank dies, so "the launcher failed" is rarely the answer
(kubeflow/mpi-operator#90). When the launcher failed, a worker of the same attempt that failed too (or whose
container was OOM-killed and restarted in place) is named instead; else a worker the launcher's log names:
Open MPI's "ORTE/PRTE has lost communication with a remote daemon ... on node" (WorkerLost), "mpirun noticed
that process rank N ... on node" or Hydra's "BAD TERMINATION ... RANK N PID P RUNNING AT" (RankFailed), or
the rank of "Process name: [[j,1],N]" placed by the hostfile. The tail shown is the
launcher's when it failed (mpirun's error is there), else the failing container's own. Pure: the tails
are read by the controller (`pods/log`) for the pod `log_request` names and handed in through Observed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mpiop import names, podstate
from mpiop.api.v2beta1 import FailureInfo, MPIJob
from mpiop.desired import ranks
from mpiop.plan import Observed
from mpiop.printable import log_line, printable
from mpiop.status import backoff, in_place

TAIL_LINES = 20
TAIL_BYTES = 2048
WORKER_LOST = "WorkerLost"  # mpirun lost the worker's daemon (ORTE/PRTE "lost communication")
RANK_FAILED = "RankFailed"  # a rank on the worker died ("mpirun noticed that process rank N ...", Hydra)
NO_SHELL = "NoShell"  # exec launch could not start mpirun's daemon: the worker's image has no /bin/sh
_DETAIL_CHARS = 300

# A named host in mpirun's error, and what it says happened there. Open MPI wraps its help texts, so a
# match may span lines ("... process rank 3 with PID 0 on\nnode pi-worker-1 exiting improperly").
_HOST_PATTERNS = (
    (re.compile(r"Remote daemon:\s*\S+\s+on node\s+(?P<host>[\w.-]+)"), WORKER_LOST),  # ORTE / PRTE
    # "mpirun noticed that process rank N with PID P on node H exited on signal 9", "... exiting improperly"
    (re.compile(r"process rank \d+ with PID \S+\s+on\s+node\s+(?P<host>[\w.-]+)"), RANK_FAILED),
    (re.compile(r"PID \d+ RUNNING AT (?P<host>[\w.-]+)"), RANK_FAILED),  # Hydra's BAD TERMINATION
    (re.compile(r"kubexec\.sh: pod (?P<host>[\w.-]+) cannot run /bin/sh"), NO_SHELL),  # exec launch (desired.kubexec)
)
# "Process name: [[51934,1],3]" (ORTE) or "[prterun-pi-launcher-17@1,3]" (PRTE): rank 3, mapped by the hostfile.
_PROCESS_NAME = re.compile(r"Process name:\s*\[(?:\[\d+,\d+\]|[^\]\s]*@\d+),(?P<rank>\d+)\]")


@dataclass(frozen=True)
class LogRequest:
    """The one container log a failure report wants: read through `pods/log`, `previous` if it restarted."""

    pod: str
    container: str
    previous: bool = False


@dataclass(frozen=True)
class Report:
    """A failed attempt, told from the pod to blame."""

    pod: str
    reason: str
    what: str  # e.g. "pi-worker-1 (ranks 2-3, node n1) container main OOMKilled exit 137"
    info: FailureInfo
    tail_from: str = ""  # "pod/container" of the tail
    tail: str = ""

    def message(self, head: str, middle: str = "", limit: int | None = None) -> str:
        """`head: what middle`, then the log tail; within `limit` characters by shortening the tail's start."""
        text = f"{head}: {self.what}{middle}"
        if not self.tail:
            return text if limit is None else text[:limit]
        lead = f"\nLast lines of {self.tail_from}:\n"
        tail = self.tail
        if limit is not None:
            room = limit - len(text) - len(lead)
            if room < 80:
                return text[:limit]
            tail = tail if len(tail) <= room else "..." + tail[len(tail) - room + 3:]
        return f"{text}{lead}{tail}"


def summary_only(what: str, reason: str = "Failed") -> Report:
    """A failure no pod is blamed for (e.g. an adopted job's launcher Job that failed), told as `what`."""
    return Report(pod="", reason=reason, what=what, info=FailureInfo(reason=reason))


def bound_tail(raw: str | bytes, lines: int = TAIL_LINES, size: int = TAIL_BYTES) -> str:
    """The last `lines` lines and at most `size` bytes of a log, each line as `printable.log_line` shows it."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    kept = [log_line(line).rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while kept and not kept[-1]:
        kept.pop()
    out = "\n".join(kept[-lines:])
    encoded = out.encode()
    if len(encoded) > size:
        out = encoded[-size:].decode("utf-8", errors="ignore")
        out = out.split("\n", 1)[1] if "\n" in out[:-1] else out
    return out


def failed_pods(observed: Observed, attempt: int) -> list[podstate.Pod]:
    """Failed pods of the attempt, not being deleted: the launcher first, then workers by index."""
    return observed.launcher_first(attempt, lambda s: s.phase == "Failed" and not s.terminating)


def blamed_pods(job: MPIJob, observed: Observed, attempt: int) -> list[podstate.Pod]:
    """The pods the attempt's failure is told from: its Failed pods, else, once they pass backoffLimit, those
    whose containers failed and were restarted in place (restartPolicy OnFailure never reaches Failed)."""
    failed = failed_pods(observed, attempt)
    if failed or not backoff.count(job, observed).past_limit:
        return failed
    return in_place.failed_pods(observed, attempt)


def log_request(job: MPIJob, observed: Observed, attempt: int) -> LogRequest | None:
    """Whose log explains the attempt's failure: the failed launcher's (mpirun's error), else the failed pod's;
    `previous` when the container has been restarted since (in place)."""
    for pod in blamed_pods(job, observed, attempt)[:1]:
        found = podstate.container_failure(pod)
        if found is not None:
            return LogRequest(podstate.name(pod), found.container, found.previous)
    return None


def _dead_worker(job: MPIJob, observed: Observed, attempt: int) -> podstate.Pod | None:
    """The lowest worker of the attempt that failed, or whose container failed and was restarted in place."""
    workers = observed.workers(job, attempt)
    for index in sorted(workers):
        pod = workers[index]
        if podstate.phase(pod) == "Failed" or podstate.container_failure(pod) is not None:
            return pod
    return None


def _host_to_pod(job: MPIJob, observed: Observed, attempt: int, host: str) -> podstate.Pod | str | None:
    """The attempt's worker a host of mpirun's error is; its name alone when no pod of that name is left (deleted
    under the launcher and not made again yet: the launcher's failure may be seen in that gap); None for the
    launcher's own ranks, another job's host, or a worker of another attempt."""
    label = host.split(".", 1)[0]
    if label == names.launcher_name(job):
        return None  # the launcher's own ranks: it stays the one to blame
    pod = next((p for p in observed.workers(job, attempt).values() if podstate.name(p) == label), None)
    if pod is not None:
        return pod
    index = observed.worker_index(job, label)
    gone = index is not None and index < job.spec.worker_replicas and all(
        podstate.name(p) != label for p in observed.pods)
    return label if gone else None


def named_worker(job: MPIJob, observed: Observed, attempt: int,
                 tail: str) -> tuple[podstate.Pod | str, str, str] | None:
    """The first worker of this attempt mpirun's error names (its pod, or its name when it is gone), with the
    reason and the line(s) naming it."""
    found: list[tuple[int, podstate.Pod | str, str, str]] = []
    for pattern, reason in _HOST_PATTERNS:
        for match in pattern.finditer(tail):
            if pod := _host_to_pod(job, observed, attempt, match["host"]):
                found.append((match.start(), pod, reason, _lines_of(tail, match)))
    for match in _PROCESS_NAME.finditer(tail):
        if (host := ranks.pod_of_rank(job, int(match["rank"]))) and (pod := _host_to_pod(job, observed, attempt, host)):
            found.append((match.start(), pod, RANK_FAILED, _lines_of(tail, match)))
    if not found:
        return None
    _, pod, reason, text = min(found, key=lambda f: f[0])
    return pod, reason, text


def _lines_of(text: str, match: re.Match[str]) -> str:
    """The whole line(s) a match spans, on one line."""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return " ".join(text[start:end if end >= 0 else len(text)].split()).strip(" =")


def _termination_message(pod: podstate.Pod) -> str:
    """The failed container's termination message (escaped: its container wrote it) and a newline, or ""
    (kubexec.sh writes its finding there)."""
    found = podstate.container_failure(pod)
    return f"{printable(found.message, newlines=True)}\n" if found is not None and found.message.strip() else ""


def _where(job: MPIJob, pod: podstate.Pod) -> str:
    found = ranks.ranks_of(job, pod)
    parts = [f"rank{'s' if len(found) > 1 else ''} {ranks.ranks_text(found)}"] if found else []
    if node := podstate.node_name(pod):
        parts.append(f"node {node}")
    return f" ({', '.join(parts)})" if parts else ""


def _gone_where(job: MPIJob, observed: Observed, name: str) -> tuple[str, str | None]:
    """` (ranks 2-3, gone)` of a worker pod no longer there (its ranks are known, its node no longer), and the
    ranks' text."""
    index = observed.worker_index(job, name)
    found = ranks.worker_ranks(job, index) if index is not None else None
    text = ranks.ranks_text(found) if found else None
    return (f" (ranks {text}, gone)" if text else " (gone)"), text


def _describe(job: MPIJob, pod: podstate.Pod, detail_told: str = "") -> str:
    """`pod (ranks, node) container c Reason exit N`, with the kubelet's message's last line, if any (and not in
    `detail_told`, already said); on one line, escaped (a container writes its termination message)."""
    name = podstate.name(pod)
    text = name + _where(job, pod) + printable(podstate.failure_summary(pod).removeprefix(name))
    found = podstate.container_failure(pod)
    detail = ""
    if found is not None and found.message.strip():
        detail = printable(found.message.strip().splitlines()[-1].strip())
    if detail and detail not in detail_told:
        text += f": {detail[:_DETAIL_CHARS]}"
    return text


def _reason(pod: podstate.Pod) -> str:
    found = podstate.container_failure(pod)
    if found is not None:
        return printable(found.reason)
    return printable(str(pod.get("status", {}).get("reason") or "Failed"))


def _info(job: MPIJob, pod: podstate.Pod, reason: str, attempt: int) -> FailureInfo:
    found = podstate.container_failure(pod)
    return FailureInfo(
        reason=reason, pod=podstate.name(pod), container=found.container if found else None,
        exit_code=found.exit_code if found else None, node=podstate.node_name(pod),
        ranks=ranks.ranks_text(found_ranks) if (found_ranks := ranks.ranks_of(job, pod)) else None, attempt=attempt,
    )


def disruption_report(job: MPIJob, pod: podstate.Pod, reason: str, message: str, attempt: int) -> Report:
    """A pod that was disrupted (its DisruptionTarget condition's reason, e.g. EvictionByEvictionAPI): the pod to
    blame, whatever else failed because it went."""
    reason = printable(reason)
    what = f"{podstate.name(pod)}{_where(job, pod)} {podstate.DISRUPTION_TARGET} {reason}"
    if message.strip():
        what += f": {printable(message.strip()[:_DETAIL_CHARS])}"
    return Report(podstate.name(pod), reason, what, _info(job, pod, reason, attempt))


def lost_worker(job: MPIJob, observed: Observed, attempt: int,
                launcher: podstate.Pod) -> tuple[str, podstate.Pod | None, str] | None:
    """The lowest worker the launcher started with and the job still wants that failed, is being deleted, is gone,
    or was made again while the launcher ran: (its name, the pod, how it was lost). mpiop deletes such a worker
    only once the attempt has ended (a restart, a suspend, cleanPodPolicy after success), so while the attempt runs
    that deletion was someone else's; and a worker mpiop makes again under the launcher carries its uid
    (names.REPLACEMENT_LABEL). Workers a scale-up adds while the launcher runs are at or above the count the
    launcher carries (names.LAUNCHED_WORKERS_LABEL); a launcher without it (made by an older mpiop) is judged only
    by failed, deleted or gone workers."""
    workers = observed.workers(job, attempt)
    started = podstate.launched_workers(launcher)
    wanted = job.spec.worker_replicas if started is None else min(job.spec.worker_replicas, started)
    for index in range(wanted):
        pod = workers.get(index)
        if pod is None:
            return names.worker_name(job, index), None, "was gone"
        if podstate.is_terminating(pod):
            return podstate.name(pod), pod, "was deleted"
        if podstate.phase(pod) == "Failed":
            return podstate.name(pod), pod, "failed"
        if podstate.replaces_under(pod, launcher):
            return podstate.name(pod), pod, "was made again (its predecessor lost)"
    return None


def lost_worker_report(job: MPIJob, observed: Observed, attempt: int) -> Report | None:
    """A launcher that Succeeded while the attempt lost a wanted worker: mpirun may exit 0 after losing a worker's
    daemon (Open MPI 5.0.7's prterun did), so that is no success; the worker is blamed. None otherwise."""
    launcher = observed.launcher(job, attempt)
    if launcher is None or podstate.attempt(launcher) != attempt or podstate.phase(launcher) != "Succeeded" \
            or podstate.is_terminating(launcher):
        return None  # a launcher being deleted decides nothing (policies/success)
    if (found := lost_worker(job, observed, attempt, launcher)) is None:
        return None
    name, pod, how = found
    if pod is None:
        where, text = _gone_where(job, observed, name)
        what, info = f"worker {name}{where} {how}", FailureInfo(reason=WORKER_LOST, pod=name, ranks=text,
                                                                attempt=attempt)
    elif how == "failed":
        what, info = f"worker {_describe(job, pod)}", _info(job, pod, _reason(pod), attempt)
    else:
        what, info = f"worker {name}{_where(job, pod)} {how}", _info(job, pod, WORKER_LOST, attempt)
    what += f" while the launcher ran; the launcher {podstate.name(launcher)} exited 0 without all its ranks"
    return Report(name, info.reason or WORKER_LOST, what, info)


def report(job: MPIJob, observed: Observed, attempt: int) -> Report | None:
    """The attempt's failure, told from the pod to blame; None when no pod of the attempt failed (or only
    restarted in place, within backoffLimit)."""
    failed = blamed_pods(job, observed, attempt)
    if not failed:
        return None
    request = log_request(job, observed, attempt)
    tail = observed.log_tails.get(request.pod, "") if request else ""
    tail_from = f"{request.pod}/{request.container}" if request else ""
    launcher = next((p for p in failed if podstate.role(p) == names.LAUNCHER_ROLE), None)
    if launcher is not None:
        if (dead := _dead_worker(job, observed, attempt)) is not None:
            what = f"{_describe(job, dead)}; then the launcher {_describe(job, launcher)}"
            return Report(podstate.name(dead), _reason(dead), what, _info(job, dead, _reason(dead), attempt),
                          tail_from, tail)
        if (named := named_worker(job, observed, attempt, _termination_message(launcher) + tail)) is not None:
            pod, reason, line = named
            if isinstance(pod, str):  # gone: its ranks are known, its node no longer
                where, text = _gone_where(job, observed, pod)
                name = pod
                info = FailureInfo(reason=reason, pod=name, ranks=text, attempt=attempt)
            else:
                name, where, info = podstate.name(pod), _where(job, pod), _info(job, pod, reason, attempt)
            what = (f"worker {name}{where}, per the launcher's log: {line[:_DETAIL_CHARS]}; "
                    f"then the launcher {_describe(job, launcher, line)}")
            return Report(name, reason, what, info, tail_from, tail)
    pod = failed[0]
    return Report(podstate.name(pod), _reason(pod), _describe(job, pod), _info(job, pod, _reason(pod), attempt),
                  tail_from, tail)
