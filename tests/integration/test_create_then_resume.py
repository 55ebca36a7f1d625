"""A client written against kubeflow's operator creates a suspended MPIJob and resumes it from the create response,
without reading it again (kubeflow's e2e "suspended on creation ... should not create pods when suspended and
succeed when resumed"): mpiop holds a suspended job's first status back, so that update never conflicts."""

from __future__ import annotations

import copy
import functools

from mpiop.kube.client import MPIJOBS, PODS, ApiError
from testkit.operator import Cluster, Operator, eventually, mpijob

ROUNDS = 20


async def test_resume_from_the_create_response_never_conflicts(cluster: Cluster, operator: Operator) -> None:
    conflicts: list[str] = []
    for i in range(ROUNDS):
        name = f"sus-{i}"
        created = await cluster.create_job(mpijob(name, workers=1, run_policy={"suspend": True}))
        # As kubeflow's test does between the two: no pod of the suspended job.
        listed = await cluster.kube.list(PODS, cluster.ns, labelSelector=f"training.kubeflow.org/job-name={name}")
        assert listed["items"] == []
        resumed = copy.deepcopy(created)
        resumed["spec"]["runPolicy"]["suspend"] = False
        try:
            await cluster.kube.replace(MPIJOBS, cluster.ns, name, resumed)
        except ApiError as error:
            if not error.conflict:
                raise
            conflicts.append(name)
    print(f"create suspended, then resume from the create response: {ROUNDS} rounds, {len(conflicts)} conflicts")
    assert conflicts == []
    # Resumed at once: each job is made (its worker pod exists) with no wait for the held status.
    for i in range(ROUNDS):
        await eventually(functools.partial(cluster.pod, f"sus-{i}-worker-0"), what=f"sus-{i}'s worker after the resume")
    job = await cluster.job("sus-0")
    assert job is not None
    assert [(c["type"], c["status"]) for c in job["status"]["conditions"]][:1] == [("Created", "True")]
