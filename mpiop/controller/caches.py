"""The informers mpiop runs and the cached shapes they keep: MPIJobs whole, owned kinds trimmed.

Owned kinds are selected by kubeflow's operator-name label and indexed by their owning job, so a
reconcile reads one job's objects without scanning. Objects of an earlier job of the same name (not yet
garbage-collected) are told apart by the owner's uid and never adopted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mpiop import names, podstate
from mpiop.api.v2beta1 import KIND, MPIJob
from mpiop.kube.client import CONFIGMAPS, MPIJOBS, PODS, SECRETS, SERVICES, KubeClient
from mpiop.kube.informer import Informer
from mpiop.kube.trim import metadata as trimmed_metadata
from mpiop.plan import Observed

JSON = dict[str, Any]
OWNER_INDEX = "owner"


def owner_key(obj: JSON) -> str | None:
    """`namespace/name` of the MPIJob that controls this object, if one does."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == KIND:
            return f"{obj['metadata'].get('namespace')}/{ref.get('name')}"
    return None


def _owner_uid(obj: JSON) -> str | None:
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == KIND), None)


def _by_owner(obj: JSON) -> Iterable[str]:
    key = owner_key(obj)
    return [key] if key else []


def trim_secret(obj: JSON) -> JSON:
    """Existence only: private keys never sit in the operator's memory."""
    return {"metadata": trimmed_metadata(obj), "type": obj.get("type")}


def trim_config_map(obj: JSON) -> JSON:
    return {"metadata": trimmed_metadata(obj), "data": obj.get("data") or {}}


def trim_service(obj: JSON) -> JSON:
    return {"metadata": trimmed_metadata(obj), "spec": {"selector": (obj.get("spec") or {}).get("selector")}}


def trim_job(obj: JSON) -> JSON:
    """Jobs are kept whole but for managedFields, which nobody here reads."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


@dataclass
class Caches:
    jobs: Informer
    pods: Informer
    config_maps: Informer
    secrets: Informer
    services: Informer

    @classmethod
    def create(cls, client: KubeClient, namespace: str | None, watch_timeout_seconds: int = 300,
               on_watch_restart: Callable[[str], None] | None = None) -> Caches:
        def owned(resource: Any, trim: Callable[[JSON], JSON]) -> Informer:
            return Informer(client, resource, namespace, label_selector=names.OWNED_SELECTOR, trim=trim,
                            indexers={OWNER_INDEX: _by_owner}, watch_timeout_seconds=watch_timeout_seconds,
                            on_watch_restart=on_watch_restart)

        return cls(
            jobs=Informer(client, MPIJOBS, namespace, trim=trim_job, watch_timeout_seconds=watch_timeout_seconds,
                          on_watch_restart=on_watch_restart),
            pods=owned(PODS, podstate.trim),
            config_maps=owned(CONFIGMAPS, trim_config_map),
            secrets=owned(SECRETS, trim_secret),
            services=owned(SERVICES, trim_service),
        )

    def all(self) -> list[Informer]:
        return [self.jobs, self.pods, self.config_maps, self.secrets, self.services]

    def owned(self) -> list[Informer]:
        return [self.pods, self.config_maps, self.secrets, self.services]

    def observed(self, job: MPIJob) -> Observed:
        def mine(informer: Informer) -> list[JSON]:
            return [o for o in informer.by_index(OWNER_INDEX, job.key) if _owner_uid(o) == job.metadata.uid]

        def one(informer: Informer, name: str) -> JSON | None:
            return next((o for o in mine(informer) if o["metadata"]["name"] == name), None)

        return Observed(
            pods=mine(self.pods),
            config_map=one(self.config_maps, names.config_map_name(job)),
            secret=one(self.secrets, names.ssh_secret_name(job)),
            service=one(self.services, names.service_name(job)),
        )

    def informer_for(self, kind: str) -> Informer:
        return {"Pod": self.pods, "ConfigMap": self.config_maps, "Secret": self.secrets,
                "Service": self.services, KIND: self.jobs}[kind]
