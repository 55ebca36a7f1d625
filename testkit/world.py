"""A simulated world for decide(): it applies each Plan to the objects it keeps, as the controller and the
apiserver would, so a test can play a job's whole life reconcile by reconcile."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from mpiop import podstate
from mpiop.api.v2beta1 import MPIJob, format_time
from mpiop.controller.trims import trim_pod
from mpiop.decide import decide
from mpiop.desired import objects
from mpiop.desired.settings import Settings
from mpiop.plan import Observed, Plan
from mpiop.podstate import Pod
from testkit.mpijobs import at
from testkit.pods import PodBuilder, make_pod

Change = Callable[[PodBuilder], PodBuilder]


class World:
    def __init__(self, job: MPIJob, cluster_domain: str = "") -> None:
        self.job = job
        self.cluster_domain = cluster_domain
        self.pods: dict[str, Pod] = {}
        self.config_map: dict[str, Any] | None = None
        self.secret: dict[str, Any] | None = None
        self.service: dict[str, Any] | None = None
        self.job_deleted = False
        self.plans: list[Plan] = []

    def observed(self) -> Observed:
        return Observed(pods=[copy.deepcopy(p) for p in self.pods.values()], config_map=self.config_map,
                        secret=self.secret, service=self.service)

    def reconcile(self, now: float) -> Plan:
        plan = decide(self.job, self.observed(), at(now), Settings(cluster_domain=self.cluster_domain))
        self.plans.append(plan)
        status = plan.status.model_copy(deep=True)
        if status != self.job.status:  # as the reconciler writes it
            status.last_reconcile_time = at(now)
        self.job = self.job.model_copy(update={"status": status})
        if plan.create_ssh_secret:
            self.secret = objects.ssh_secret(self.job, b"private", b"public")
        for obj in plan.objects_to_create + plan.objects_to_update:
            if obj["kind"] == "Pod":
                name = obj["metadata"]["name"]
                assert name not in self.pods, "a pod is made only once its predecessor is gone"
                made = copy.deepcopy(obj)
                made["metadata"]["uid"] = f"uid-{name}-{len(self.plans)}"  # the apiserver's, new for each pod
                self.pods[name] = trim_pod(made)
            elif obj["kind"] == "ConfigMap":
                self.config_map = copy.deepcopy(obj)
            elif obj["kind"] == "Service":
                self.service = copy.deepcopy(obj)
        for pod in plan.pods_to_delete:  # cached pods are replaced, never changed in place (podsnapshot.TrimmedPod)
            cached = self.pods[podstate.name(pod)]
            deleting = {**cached["metadata"], "deletionTimestamp": format_time(at(now))}
            self.pods[podstate.name(pod)] = trim_pod({**cached, "metadata": deleting})
        self.job_deleted = self.job_deleted or plan.delete_mpijob
        return plan

    def set(self, name: str, change: Change) -> None:
        """Move one pod to another state (its identity and deletionTimestamp are kept)."""
        pod = self.pods[name]
        role, index, attempt = podstate.role(pod), podstate.replica_index(pod) or 0, podstate.attempt(pod)
        status = change(make_pod(self.job, role, index, attempt)).obj()["status"]
        self.pods[name] = trim_pod({**pod, "status": status})

    def set_all(self, change: Change) -> None:
        for name in self.pods:
            self.set(name, change)

    def gone(self) -> None:
        """The kubelet has finished every pod being deleted."""
        self.pods = {n: p for n, p in self.pods.items() if not podstate.is_terminating(p)}

    # --- reading ---

    @property
    def conditions(self) -> list[str]:
        return [f"{c.type}={c.status}" for c in self.job.status.conditions]

    @property
    def state(self) -> str:
        """What `kubectl get mpijob` shows: the last condition."""
        return self.job.status.conditions[-1].type

    def live_pods(self) -> dict[str, int]:
        """Name -> attempt of the pods not being deleted."""
        return {n: podstate.attempt(p) for n, p in sorted(self.pods.items()) if not podstate.is_terminating(p)}


def names_of(objs: list[dict[str, Any]]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" if "kind" in o else podstate.name(o) for o in objs]


def running(b: PodBuilder) -> PodBuilder:
    return b.running()

