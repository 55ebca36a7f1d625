"""Jobs kubeflow/mpi-operator started: taken over in place, never started twice.

kubeflow's operator runs the launcher as a batch/v1 `Job` (`<job>-launcher`, whose pod is named
`<job>-launcher-xxxxx`) beside worker pods named as mpiop names them (without mpiop's attempt label, so
they count as attempt 0), and labels its ConfigMap, Secret and Service `app: <job>` only. When mpiop
starts on such a cluster (kubeflow's operator scaled to zero first):

- a job kubeflow finished stays exactly as it is: status, pods, even its TTL (kubeflow's operator never
  deleted finished MPIJobs). mpiop stamps lastReconcileTime on every status it writes and kubeflow never
  does, so a finished status without it was finished by someone else;
- while the current attempt is the first one, kubeflow's launcher Job is this attempt's launcher: the job
  succeeds when the Job completes (or its pod succeeds), a failed Job (its backoffLimit spent) is a failed
  attempt, Running follows its pod and the workers; the running workers are kept and no launcher Pod is
  made, so no rank runs twice. kubeflow's conditions and reasons are kept and continued;
- any other way the attempt ends (a failed worker, the deadline, suspend) goes through mpiop's own
  policies, and kubeflow's launcher Job is deleted with its pods when its run is over: a restart makes
  mpiop's own launcher Pod, once the old launcher's pods are gone. After success, cleanPodPolicy applies to
  the Job as to a launcher Pod: All deletes it, Running only while its pod still runs, None keeps it;
- the ConfigMap, Secret and Service it controls are claimed (labelled as mpiop labels its own) when
  creating them finds them there, so the informers see them from then on.
"""

from __future__ import annotations

import datetime as dt

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import ensure
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.plan import Observed, Plan
from mpiop.policies import cleanup as clean_pod_policy
from mpiop.policies import failure, host_ports, success
from mpiop.policies.outcome import CONTINUE, STOP, Outcome
from mpiop.status import lifecycle

ADOPTED_REASON = "MPIJobAdopted"


def finished_under_kubeflow(job: MPIJob) -> bool:
    """Finished, and mpiop never wrote its status: left exactly as it is."""
    return job.status.finished and job.status.last_reconcile_time is None


def _true_condition(launcher_batch_job: JSON, condition_type: str) -> JSON | None:
    conditions = (launcher_batch_job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == condition_type and c.get("status") == "True"), None)


def _pods_of(launcher_batch_job: JSON, observed: Observed) -> list[podstate.Pod]:
    uid = launcher_batch_job["metadata"].get("uid")
    return [p for p in observed.launcher_batch_job_pods
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]


def apply(plan: Plan, job: MPIJob, observed: Observed, now: dt.datetime,
          settings: Settings = DEFAULT_SETTINGS) -> Outcome:
    """Run a job whose launcher is kubeflow's Job (STOP), or leave it to mpiop's own flow (CONTINUE)."""
    launcher_batch_job = observed.launcher_batch_job
    if launcher_batch_job is None and not observed.launcher_batch_job_pods:
        return CONTINUE
    if launcher_batch_job is None or plan.status.attempt != 0:
        # An earlier attempt's launcher: it goes; this attempt's launcher Pod waits until its pods are gone.
        retire(plan, observed)
        ensure.job_pods(plan, job, observed, False, host_ports.for_plan(plan, job, observed, settings), settings)
        return STOP
    if job.status.last_reconcile_time is None:
        plan.event("Normal", ADOPTED_REASON, f"MPIJob {job.key} is taken over from kubeflow/mpi-operator: its "
                                             f"launcher Job {launcher_batch_job['metadata']['name']} runs on.")
    pods = _pods_of(launcher_batch_job, observed)
    if _true_condition(launcher_batch_job, "Complete") or any(podstate.phase(p) == "Succeeded" for p in pods):
        success.mark_succeeded(plan, job, now)
        return STOP
    job_failed = _true_condition(launcher_batch_job, "Failed")
    if job_failed is not None:
        summary = (f"launcher Job {launcher_batch_job['metadata']['name']} {job_failed.get('reason') or 'Failed'}: "
                   f"{job_failed.get('message') or ''}").rstrip(": ")
        failure.attempt_failed(plan, job, observed, now, summary)
    elif failure.apply(plan, job, observed, now) is CONTINUE:
        if any(podstate.is_running(p) for p in pods):
            lifecycle.mark_running_if_workers_run(plan, job, observed, now)
        ensure.job_pods(plan, job, observed, False, host_ports.for_plan(plan, job, observed, settings), settings)
        return STOP
    if not plan.status.finished:  # restarting: kubeflow's launcher goes with the workers
        retire(plan, observed)
    return STOP


def retire(plan: Plan, observed: Observed) -> None:
    """Delete kubeflow's launcher Job (its pods go with it), unless it is already going."""
    launcher_batch_job = observed.launcher_batch_job
    if launcher_batch_job is not None and not launcher_batch_job["metadata"].get("deletionTimestamp"):
        plan.launcher_batch_job_to_delete = launcher_batch_job


def cleanup(plan: Plan, job: MPIJob, observed: Observed) -> None:
    """cleanPodPolicy for a finished job's launcher Job, as for a launcher Pod."""
    if observed.launcher_batch_job is None:
        return
    running = any(podstate.is_active(p) for p in _pods_of(observed.launcher_batch_job, observed))
    if clean_pod_policy.deletes(job.spec.run_policy.effective_clean_pod_policy, running):
        retire(plan, observed)


def claim_patch(job: MPIJob) -> list[JSON]:
    """The JSON patch that labels kubeflow's ConfigMap, Secret or Service of this job as mpiop labels its own.

    Its first operation tests that this job (its uid) controls the object, as kubeflow's operator made it
    (one owner reference, labels `app: <job>`): anything else is refused by the apiserver and left alone.
    """
    def escaped(key: str) -> str:
        return key.replace("~", "~0").replace("/", "~1")

    return [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": job.metadata.uid},
        *({"op": "add", "path": f"/metadata/labels/{escaped(k)}", "value": v}
          for k, v in names.supporting_labels(job).items()),
    ]
