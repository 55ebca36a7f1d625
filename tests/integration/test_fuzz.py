"""Fuzz: generated MPIJobs, valid and broken, against the real apiserver with the operator running.

Each job is either refused at admission with a message naming the field, or reaches Running, Failed or
Suspended with a reason (the test plays the kubelet, and plays the cluster admin who creates a missing
ServiceAccount or PriorityClass once the job says it is missing). None may sit in Created without a condition
saying why; the operator never stops (no crash) and logs no reconcile error (the operator fixture checks).
Bounded: a few batches of a few jobs, at most a minute in all.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import CleanPodPolicy, LauncherCreationPolicy, MPIImplementation, RestartPolicy
from mpiop.kube.client import MPIJOBS, PODS, ApiError, Resource
from testkit.operator import Cluster, Operator
from testkit.strategies import dns_labels, optional, pod_templates

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PRIORITYCLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
FIELD_PATH = re.compile(r"\b(spec|metadata)\.[A-Za-z]")
BATCH_SECONDS = 20.0  # per batch of 4-7 jobs; three batches: the test stays within a minute

# What a careless or hostile tenant writes: each breaks one rule, at admission or only at pod creation.
BREAKAGES: dict[str, Any] = {
    "launcher-replicas": lambda job: _replica(job, "Launcher").update(replicas=2),
    "no-workers": lambda job: _replica(job, "Worker").update(replicas=0),
    "too-many-workers": lambda job: _replica(job, "Worker").update(replicas=10_001),
    "bad-name": lambda job: job["metadata"].update(name="Bad." + job["metadata"]["name"]),
    "no-containers": lambda job: _pod_spec(job, "Worker").update(containers=[]),
    "relative-ssh-path": lambda job: job["spec"].update(sshAuthMountPath=".ssh"),
    "unknown-clean-policy": lambda job: job["spec"]["runPolicy"].update(cleanPodPolicy="Finished"),
    "bad-env-name": lambda job: _pod_spec(job, "Worker")["containers"][0].update(env=[{"name": "1=2", "value": "x"}]),
    "priority-without-class": lambda job: _pod_spec(job, "Launcher").update(priority=7),
    "overhead": lambda job: _pod_spec(job, "Worker").update(overhead={"cpu": "1"}),
    "missing-service-account": lambda job: _pod_spec(job, "Worker").update(serviceAccountName="fuzz-sa"),
}


def _replica(job: JSON, replica: str) -> JSON:
    found: JSON = job["spec"]["mpiReplicaSpecs"][replica]
    return found


def _pod_spec(job: JSON, replica: str) -> JSON:
    spec: JSON = _replica(job, replica)["template"]["spec"]
    return spec


@st.composite
def fuzz_jobs(draw: st.DrawFn) -> JSON:
    replicas: JSON = {
        "Launcher": {"replicas": 1, "template": draw(pod_templates)},
        "Worker": {"replicas": draw(st.integers(1, 3)), "template": draw(pod_templates)},
    }
    for replica in replicas.values():
        if draw(st.booleans()):
            replica["restartPolicy"] = draw(st.sampled_from(get_args(RestartPolicy)))
    spec: JSON = {
        "mpiReplicaSpecs": replicas,
        "runPolicy": {k: v for k, v in {
            "cleanPodPolicy": draw(optional(st.sampled_from(get_args(CleanPodPolicy)))),
            "backoffLimit": draw(optional(st.integers(0, 3))),
            "activeDeadlineSeconds": draw(optional(st.sampled_from([1, 2, 3600]))),
            "suspend": draw(optional(st.booleans())),
        }.items() if v is not None},
    }
    for key, strategy in (("slotsPerWorker", st.integers(0, 2**31 - 1)), ("runLauncherAsWorker", st.booleans()),
                          ("launcherCreationPolicy", st.sampled_from(get_args(LauncherCreationPolicy))),
                          ("mpiImplementation", st.sampled_from(get_args(MPIImplementation)))):
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    job: JSON = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                 "metadata": {"name": f"fz{draw(dns_labels)}-{uuid.uuid4().hex[:5]}"}, "spec": spec}
    breakage = draw(optional(st.sampled_from(sorted(BREAKAGES))))
    if breakage is not None:
        BREAKAGES[breakage](job)
        job["metadata"].setdefault("annotations", {})["fuzz/breakage"] = breakage
    return job


def _conditions(job: JSON) -> dict[str, JSON]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or [] if c["status"] == "True"}


async def _admin_heals(cluster: Cluster, job: JSON, made: set[str]) -> None:
    """Create the ServiceAccount and PriorityClasses the job's templates name (as a cluster admin would)."""
    for replica in job["spec"]["mpiReplicaSpecs"].values():
        spec = replica["template"].get("spec") or {}
        wanted = [(SERVICEACCOUNTS, cluster.ns, spec.get("serviceAccountName"), {}),
                  (PRIORITYCLASSES, None, spec.get("priorityClassName"), {"value": 1000})]
        for resource, namespace, name, body in wanted:
            if name and f"{resource.plural}/{name}" not in made:
                made.add(f"{resource.plural}/{name}")
                try:
                    await cluster.kube.create(resource, namespace, {"metadata": {"name": name}, **body})
                except ApiError as error:
                    if not error.already_exists:
                        raise


async def _kubelet(cluster: Cluster) -> None:
    """Every pod that exists and is not going away runs and is Ready."""
    for name, pod in (await cluster.pods()).items():
        if not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") != "Running":
            try:
                await cluster.set_phase(name, "Running", ready=True)
            except ApiError as error:
                if not (error.not_found or error.conflict):
                    raise


@pytest.mark.templates_warned  # generated templates ask e.g. 500m bytes of memory: the apiserver warns of the pods
@settings(max_examples=3, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(batch=st.lists(fuzz_jobs(), min_size=4, max_size=7))
async def test_every_generated_job_is_refused_or_ends_with_a_reason(cluster: Cluster, operator: Operator,
                                                                    batch: list[JSON]) -> None:
    created: dict[str, str] = {}  # name -> breakage
    for job in batch:
        breakage = job["metadata"].get("annotations", {}).get("fuzz/breakage", "")
        try:
            await cluster.create_job(job)
        except ApiError as error:
            assert error.status == 422, f"{breakage}: {error}"
            assert FIELD_PATH.search(error.message), f"refused without a field path: {error.message}"
            continue
        created[job["metadata"]["name"]] = breakage

    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    healed: set[str] = set()
    deadline = time.monotonic() + BATCH_SECONDS
    while time.monotonic() < deadline and len(outcomes) < len(created):
        for name in created:
            if name in outcomes:
                continue
            found = await cluster.job(name)
            assert found is not None, f"{name} disappeared"
            true = _conditions(found)
            for ending in ("Failed", "Suspended", "Running"):
                if ending in true:
                    assert true[ending].get("reason"), f"{name}: {ending} without a reason"
                    outcomes[name] = f"{ending}/{true[ending]['reason']}"
                    messages[name] = true[ending].get("message", "")
            if name not in outcomes and "ReplicaFailure" in true:
                await _admin_heals(cluster, found, healed)
        await _kubelet(cluster)
        await asyncio.sleep(0.3)  # poll interval of this kubelet and of the read of the jobs' conditions

    stuck = {}
    for name in set(created) - set(outcomes):
        true = _conditions(await cluster.job(name) or {})
        if "ReplicaFailure" not in true:  # Created with nothing saying why it does not go on
            stuck[name] = (created[name], sorted(true))
    assert not stuck, f"jobs stuck without an explaining condition: {stuck}"
    assert operator.manager.working, "the operator stopped"
    # No reconcile error either: the operator fixture fails the test on any it logged (409 conflicts aside).
    for name, breakage in created.items():
        if breakage in ("bad-env-name", "priority-without-class", "overhead"):
            # Failed (ValidationError, or a 1-2 s deadline that came first) or Suspended: never Running, never stuck.
            assert outcomes.get(name, "").startswith(("Failed/", "Suspended")), (name, breakage, outcomes.get(name))
    tally = sorted(f"{created[n] or 'valid'} -> {outcomes.get(n, 'ReplicaFailure')}" for n in created)
    for name, outcome in outcomes.items():
        if outcome == "Failed/ValidationError" and not created[name]:
            print(f"  {name}: {messages[name]}")
    print(f"fuzz batch: {len(batch) - len(created)} refused at admission; {'; '.join(tally)}")
    for name in created:
        await _delete(cluster, MPIJOBS, cluster.ns, name)
    for pod in await cluster.pods():  # the garbage collector may be deleting them already
        await _delete(cluster, PODS, cluster.ns, pod)
    for made in healed:
        if made.startswith("priorityclasses/"):
            await _delete(cluster, PRIORITYCLASSES, None, made.split("/", 1)[1])


async def _delete(cluster: Cluster, resource: Resource, namespace: str | None, name: str) -> None:
    try:
        await cluster.kube.delete(resource, namespace, name, grace_period_seconds=0)
    except ApiError as error:
        if not error.not_found:
            raise
