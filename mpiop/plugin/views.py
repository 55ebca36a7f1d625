"""What `kubectl mpijob status` and `attempts` print, from the objects as the apiserver returns them (pure).

The job is read as raw JSON beside its model: fields another mpiop version adds (status.trainerStatus, the
progress a training loop reports) are shown when present without this version knowing their shape.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired.evidence import SUMMARY_KEY
from mpiop.desired.evidence import log_key as key_of
from mpiop.plugin.tables import NONE, age, table
from mpiop.printable import printable

FAILURE_COLUMN = 90  # the attempts table's FAILURE cell: the blamed pod, its ranks, node and exit, cut here


def state(job: MPIJob) -> str:
    """The job's state as `kubectl get mpijob` shows it: the type of its last condition."""
    conditions = job.status.conditions
    return conditions[-1].type if conditions else "Pending"


def attempt_of(job: MPIJob) -> int:
    return job.status.attempt


def first_paragraph(text: str) -> str:
    """A failure report's summary: its text up to the log tail that follows it."""
    return text.strip().split("\n", 1)[0].strip()


def last_failure(job: MPIJob, attempt_config_maps: Sequence[JSON] = ()) -> str | None:
    """The last failure in one paragraph: the report of a True Failed or Restarting condition, else the summary
    saved with the latest failed attempt's logs, else status.lastFailure's fields."""
    for kind in ("Failed", "Restarting"):
        found = job.status.condition(kind)
        if found is not None and found.status == "True" and found.message:
            return first_paragraph(found.message)
    saved = sorted(attempt_config_maps, key=lambda m: _label_int(m, names.ATTEMPT_LABEL) or 0)
    summary = ((saved[-1].get("data") or {}).get(SUMMARY_KEY) if saved else None)
    if summary:
        return first_paragraph(summary)
    failure = job.status.last_failure
    if failure is None:
        return None
    parts = [f"attempt {failure.attempt}" if failure.attempt is not None else "", failure.pod or "",
             f"ranks {failure.ranks}" if failure.ranks else "", f"node {failure.node}" if failure.node else "",
             f"container {failure.container}" if failure.container else "", failure.reason,
             f"exit {failure.exit_code}" if failure.exit_code is not None else ""]
    return " ".join(p for p in parts if p)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        return [(prefix, ", ".join(str(v) for v in value))]
    return [(prefix, str(value))]


def status_text(raw: JSON, attempt_config_maps: list[JSON], now: dt.datetime) -> str:
    """`kubectl mpijob status NAME`: phase, milestones, attempts, excluded nodes, progress, the last failure."""
    job = MPIJob.model_validate(raw)
    status = job.status
    policy = job.spec.run_policy
    restarts = status.attempt
    workers = status.replica_statuses.get("Worker")
    ready = f"{workers.ready or 0} ready, " if workers is not None else ""
    lines = [
        f"Name:             {job.metadata.name}",
        f"Namespace:        {job.metadata.namespace}",
        f"State:            {state(job)}" + (" (suspended)" if policy.suspend else ""),
        f"Workers:          {ready}{job.spec.worker_replicas} wanted",
        f"Attempt:          {attempt_of(job)} (restarts {restarts} of backoffLimit {policy.effective_backoff_limit}"
        + (f", {status.disruption_restarts} after disruptions" if status.disruption_restarts else "") + ")",
        f"Attempt started:  {age(_time(status.attempt_start_time), now)} ago" if status.attempt_start_time
        else f"Attempt started:  {NONE}",
        f"Excluded nodes:   {', '.join(status.excluded_nodes) if status.excluded_nodes else NONE}",
    ]
    lines += [f"  {e.node}: {e.message}" for e in status.node_exclusions or []]
    if (stop := status.condition("Stopping")) is not None:  # a graceful stop under way, or how the last one went
        lines.append(f"Graceful stop:    {stop.message or stop.reason or ''}")
    progress = (raw.get("status") or {}).get("trainerStatus")
    if progress:
        lines.append("Progress:")
        lines += [f"  {key}: {value}" for key, value in _flatten(progress)]
    else:
        lines.append(f"Progress:         {NONE} (not reported)")
    lines.append("Milestones:")
    milestones = [("Created", raw.get("metadata", {}).get("creationTimestamp"), "")]
    milestones += [(c.type if c.status == "True" else f"{c.type}={c.status}", _time(c.last_transition_time),
                    c.reason or "") for c in status.conditions]
    if status.completion_time is not None:
        milestones.append(("Completed", _time(status.completion_time), ""))
    rows = [[kind, age(when, now), reason] for kind, when, reason in milestones[1:] or milestones]
    lines += ["  " + line for line in table(["Milestone", "Age", "Reason"], rows).splitlines()]
    failure = last_failure(job, attempt_config_maps)
    lines.append(f"Last failure:     {failure}" if failure else f"Last failure:     {NONE}")
    # Each line escaped, and a line break inside one too: a job's pods write its trainerStatus, termination messages
    # and saved summaries, and whoever runs `kubectl mpijob status` is someone else.
    return "\n".join(printable(line) for line in lines) + "\n"


def _time(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def failure_cell(summary: str) -> str:
    """From a failure report (`MPIJob ns/x is restarting (...): <pod> (ranks, node) container c Error exit 1; ...`),
    what failed: the text after the first '): ' up to the first ';', cut to FAILURE_COLUMN."""
    head = first_paragraph(summary)
    blamed = head.split("): ", 1)[1] if "): " in head else head
    blamed = blamed.split("; ", 1)[0]
    return blamed if len(blamed) <= FAILURE_COLUMN else blamed[:FAILURE_COLUMN - 3] + "..."


def attempts_rows(raw: JSON, attempt_config_maps: list[JSON], pods: list[JSON], now: dt.datetime) -> list[list[str]]:
    """One row per attempt, oldest first: its state, launcher pod (if kept), age, what failed, where its logs are."""
    job = MPIJob.model_validate(raw)
    current = attempt_of(job)
    saved = {_label_int(m, names.ATTEMPT_LABEL): m for m in attempt_config_maps}
    pod_names = {p["metadata"]["name"]: p for p in pods}
    rows = []
    for attempt in range(current + 1):
        launcher = names.launcher_name(job, attempt)
        pod = pod_names.get(launcher)
        kept = pod is not None and _label_int(pod, names.ATTEMPT_LABEL) in (attempt, None)
        started = (pod or {}).get("metadata", {}).get("creationTimestamp") if kept else None
        config_map = saved.get(attempt)
        summary = ((config_map or {}).get("data") or {}).get(SUMMARY_KEY, "")
        if attempt < current:
            result = "Restarted"
        else:
            result = state(job)
            if result in ("Failed", "Restarting") and not summary:
                summary = last_failure(job) or ""
        rows.append([str(attempt), result, launcher if kept else NONE, age(started, now) if started else NONE,
                     failure_cell(summary) if summary else NONE,
                     config_map["metadata"]["name"] if config_map is not None else NONE])
    return rows


ATTEMPT_HEADERS = ["Attempt", "State", "Launcher", "Age", "Failure", "Logs"]


def attempts_table(raw: JSON, attempt_config_maps: list[JSON], pods: list[JSON], now: dt.datetime) -> str:
    return table(ATTEMPT_HEADERS, attempts_rows(raw, attempt_config_maps, pods, now))


def pod_attempt(pod: JSON) -> int | None:
    """The attempt a pod of the job belongs to (its mpiop attempt label), None when it has none."""
    return _label_int(pod, names.ATTEMPT_LABEL)


def saved_log(config_map: JSON, pod: str, container: str | None) -> tuple[str, str]:
    """A pod's log in an attempt's ConfigMap: (key, text); ValueError names the pods whose logs it keeps."""
    data: dict[str, str] = config_map.get("data") or {}
    wanted = [key_of(pod, container)] if container else [k for k in sorted(data) if k.startswith(f"{pod}.")]
    for key in wanted:
        if key in data:
            return key, data[key]
    kept = ", ".join(sorted(k for k in data if k != SUMMARY_KEY)) or NONE
    raise SavedLogMissingError(f"ConfigMap {config_map['metadata']['name']} has no log of {pod}"
                          + (f" container {container}" if container else "")
                          + f": it keeps the launcher's and the failed pods' ({kept})")


class SavedLogMissingError(LookupError):
    """The attempt's ConfigMap does not hold the log asked for."""


def missing_pod(job: MPIJob, pod: str, attempt: int, *, launcher_kept: bool, saved: JSON | None) -> str:
    """Why the current attempt's `pod` is not there (a finished job's cleanPodPolicy deletes its running workers),
    and where its ranks' output is instead: mpirun gathers every rank's output into the launcher's log, which is
    kept (`launcher_kept`) or, when the attempt failed, saved in its ConfigMap (`saved`)."""
    name, namespace = job.metadata.name, job.metadata.namespace
    launcher = names.launcher_name(job, attempt)
    text = f'pod "{pod}" of mpijob {name} not found in namespace "{namespace}" (attempt {attempt})'
    policy = job.spec.run_policy.effective_clean_pod_policy
    if job.status.finished and policy != "None":
        cleaned = "every pod" if policy == "All" else "its pods still running"
        text += f": the job {state(job)}, and cleanPodPolicy {policy} deleted {cleaned}"
    if pod == launcher:
        return text
    saved_data: dict[str, str] = (saved or {}).get("data") or {}
    if launcher_kept or any(key.startswith(f"{launcher}.") for key in saved_data):
        kept_where = "" if launcher_kept else f", saved in ConfigMap {(saved or {})['metadata']['name']}"
        return (f"{text}. mpirun gathers every rank's output into the launcher's log{kept_where}: "
                f"kubectl mpijob logs {name} -n {namespace} --launcher")
    if job.status.finished and policy == "All":
        return f"{text}. The launcher's log, where mpirun gathers every rank's output, went with its pod"
    return text


def _label_int(obj: JSON, key: str) -> int | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
