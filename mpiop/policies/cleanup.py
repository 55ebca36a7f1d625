"""cleanPodPolicy: which pods go once the job has finished.

Running (mpiop's default) deletes pods still Pending or Running, so a finished job frees its GPUs while
the launcher's log stays readable; All deletes every pod; None keeps them all.
"""

from __future__ import annotations

from mpiop import podstate
from mpiop.api.v2beta1 import CleanPodPolicy, MPIJob
from mpiop.plan import Observed, Plan
from mpiop.policies.outcome import CONTINUE, Outcome


def deletes(policy: CleanPodPolicy, active: bool) -> bool:
    """Whether the policy deletes a finished job's pod, or kubeflow's launcher Job (policies/adoption), that is
    `active` (Pending or Running) or not."""
    return policy == "All" or (policy == "Running" and active)


def pods_to_delete(policy: CleanPodPolicy, pods: list[podstate.Pod]) -> list[podstate.Pod]:
    return [p for p in pods if not podstate.is_terminating(p) and deletes(policy, podstate.is_active(p))]


def apply(plan: Plan, job: MPIJob, observed: Observed) -> Outcome:
    plan.delete_pods(pods_to_delete(job.spec.run_policy.effective_clean_pod_policy, observed.pods))
    return CONTINUE
