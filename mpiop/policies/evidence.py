"""Evidence: a failed attempt's logs are saved before its pods go, so a restart does not erase why it failed.

When this pass fails an attempt (a restart or the final failure: status.lastFailure is new), the reconciler reads
the logs named here and, before it deletes the attempt's pods, saves them in ConfigMap `<job>-attempt-<n>`
(desired/evidence bounds their size): the launcher's (mpirun's account of the failure) and each failed or disrupted
pod's, and the pod the failure blames: when the launcher's failure is seen before the dead worker's, the worker
still looks alive, and only mpirun's log (status/failure_report) names it. A pod whose containers never started is
recorded as such. A stalled attempt (policies/stall) blames no rank: every worker's log is kept, and with any
failure the job's last progress report (status.trainerStatus). The last `keep` of a job's attempt ConfigMaps stay;
older ones are deleted, and all go with the job (owner reference).
"""

from __future__ import annotations

import json

from mpiop import names, podstate
from mpiop.api.v2beta1 import MPIJob
from mpiop.plan import Evidence, LogSource, Observed, Plan
from mpiop.policies.outcome import CONTINUE, Outcome
from mpiop.status import conditions as c


def log_sources(job: MPIJob, observed: Observed, attempt: int, blamed: str | None = None,
                every_worker: bool = False) -> list[LogSource]:
    """The attempt's launcher, then its failed, restarted-in-place or disrupted workers and the `blamed` one (or,
    `every_worker`, all of them: a stall blames no rank, any may be the one stuck), by index."""
    launcher = observed.launcher(job, attempt)
    workers = observed.workers(job, attempt)
    failed = [workers[i] for i in sorted(workers)
              if every_worker or podstate.phase(workers[i]) == "Failed"
              or podstate.container_failure(workers[i]) is not None
              or podstate.disruption(workers[i]) is not None or podstate.name(workers[i]) == blamed]
    return [_source(pod) for pod in ([launcher] if launcher is not None else []) + failed]


def _source(pod: podstate.Pod) -> LogSource:
    name = podstate.name(pod)
    failed = podstate.container_failure(pod)
    started = pod.get("status", {}).get("containerStatuses") or []
    container = failed.container if failed is not None else str(started[0]["name"]) if started else None
    if container is None:
        return LogSource(name, None, unreadable="no container of this pod started")
    if podstate.node_name(pod) is None:  # the apiserver answers an empty log: there is no kubelet to ask
        return LogSource(name, container, unreadable="the pod was never scheduled to a node")
    return LogSource(name, container, failed is not None and failed.previous)


def _attempt_of(config_map: dict[str, object]) -> int:
    try:
        return int(podstate.labels(config_map).get(names.ATTEMPT_LABEL, "-1"))
    except ValueError:
        return -1


def apply(plan: Plan, job: MPIJob, observed: Observed, keep: int) -> Outcome:
    """Ask for the failed attempt's logs to be saved, if this plan failed one, and for all but the last `keep`
    attempts' ConfigMaps to go."""
    failure = plan.status.last_failure
    if failure is None or failure.attempt is None or failure == job.status.last_failure:
        return CONTINUE
    name = names.attempt_config_map_name(job, failure.attempt)
    state = plan.status.condition("Failed") if plan.status.is_true("Failed") else plan.status.condition("Restarting")
    older = sorted((m for m in observed.attempt_config_maps if m["metadata"]["name"] != name),
                   key=_attempt_of, reverse=True)
    summary = (state.message or "") if state is not None else ""
    stalled = failure.reason == c.STALLED_REASON
    report = plan.status.trainer_status
    plan.evidence = Evidence(name, failure.attempt, summary,
                             log_sources(job, observed, failure.attempt, failure.pod, every_worker=stalled),
                             [m["metadata"]["name"] for m in older[max(keep - 1, 0):]],
                             progress=json.dumps(report.to_json()) if report is not None else "")
    return CONTINUE
