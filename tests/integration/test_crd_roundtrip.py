"""Property: any valid MPIJob spec survives models -> JSON -> apiserver -> JSON -> models unchanged, but for
kubeflow's CRD defaults filled into fields left unset.

This is what lets the controller trust its models: the CRD neither prunes a field the models write nor
rewrites a value; it only adds kubeflow's defaults outside pod templates (pod templates here have no
container ports, whose list-map key `protocol` the apiserver fills in).
"""

from __future__ import annotations

import uuid
from typing import get_args

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpiop.api.crd import crd
from mpiop.api.v2beta1 import (
    CleanPodPolicy,
    LauncherCreationPolicy,
    MPIImplementation,
    MPIJob,
    MPIJobSpec,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
    RunPolicy,
    SchedulingPolicy,
)
from mpiop.kube.client import MPIJOBS, KubeClient
from testkit.kubeflow import with_crd_defaults
from testkit.strategies import dns_labels, optional, pod_templates, quantities, resource_names, words

INT32 = 2**31 - 1


run_policies = st.builds(
    RunPolicy,
    clean_pod_policy=optional(st.sampled_from(get_args(CleanPodPolicy))),
    ttl_seconds_after_finished=optional(st.integers(0, INT32)),
    active_deadline_seconds=optional(st.integers(0, 2**63 - 1)),
    backoff_limit=optional(st.integers(0, INT32)),
    scheduling_policy=optional(st.builds(
        SchedulingPolicy,
        min_available=optional(st.integers(0, INT32)),
        queue=optional(words),
        min_resources=optional(st.dictionaries(resource_names, quantities, max_size=3)),
        priority_class=optional(dns_labels),
        schedule_timeout_seconds=optional(st.integers(0, INT32)),
    )),
    suspend=optional(st.booleans()),
    managed_by=optional(st.sampled_from(["kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue", "x"])),
)


@st.composite
def specs(draw: st.DrawFn) -> MPIJobSpec:
    launcher = ReplicaSpec(
        replicas=draw(optional(st.just(1))),
        template=draw(pod_templates),
        restart_policy=draw(optional(st.sampled_from(get_args(RestartPolicy)))),
    )
    replica_specs = {"Launcher": launcher}
    run_launcher_as_worker = draw(optional(st.booleans()))
    if not run_launcher_as_worker or draw(st.booleans()):
        replica_specs["Worker"] = ReplicaSpec(
            replicas=draw(optional(st.integers(1, 64))),
            template=draw(pod_templates),
            restart_policy=draw(optional(st.sampled_from(get_args(RestartPolicy)))),
        )
    return MPIJobSpec(
        slots_per_worker=draw(optional(st.integers(0, INT32))),
        run_launcher_as_worker=run_launcher_as_worker,
        ssh_auth_mount_path=draw(optional(st.from_regex(r"/[a-z0-9/._-]{0,20}", fullmatch=True))),
        launcher_creation_policy=draw(optional(st.sampled_from(get_args(LauncherCreationPolicy)))),
        mpi_implementation=draw(optional(st.sampled_from(get_args(MPIImplementation)))),
        mpi_replica_specs=replica_specs,
        run_policy=draw(run_policies),
    )


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=specs(), labels=st.dictionaries(dns_labels, dns_labels, max_size=3))
async def test_spec_round_trips_through_the_apiserver(kube: KubeClient, mpijob_crd: str, namespace: str,
                                                     spec: MPIJobSpec, labels: dict[str, str]) -> None:
    name = f"rt-{uuid.uuid4().hex[:12]}"
    job = MPIJob(metadata=ObjectMeta(name=name, labels=labels), spec=spec)
    sent = job.to_json()

    expected = with_crd_defaults(crd(), sent)
    created = await kube.create(MPIJOBS, namespace, sent)
    assert created["spec"] == expected["spec"]
    back = MPIJob.model_validate(created)
    assert back.spec == MPIJob.model_validate(expected).spec
    assert back.metadata.labels == labels

    fetched = MPIJob.model_validate(await kube.get(MPIJOBS, namespace, name))
    assert fetched.spec == back.spec
    await kube.delete(MPIJOBS, namespace, name)
