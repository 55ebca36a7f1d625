"""What a job's pods get to report their progress to mpiop's status endpoint (KEP-2779's design, for MPIJobs).

Each container gets a projected volume with a service-account token whose audience is mpiop's alone (it grants
no API rights: the apiserver refuses it, and only mpiop's TokenReview accepts it, for a pod of this job) and the
CA that signed mpiop's serving certificate, taken from the job's hostfile ConfigMap; and three variables naming
them and the job's status URL, as Trainer's runtime reads its own. Annotation mpiop.kubeflow.org/report-progress:
"false" leaves a job's pods without them (and the endpoint refuses its posts); --no-status-endpoint, every job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import GROUP, PLURAL, VERSION, MPIJob
from mpiop.desired import env

AUDIENCE = "mpiop.kubeflow.org"
VOLUME = "mpiop-status"
MOUNT_PATH = "/var/run/secrets/mpiop.kubeflow.org/status"
CA_KEY = "mpiop-status-ca.crt"  # in the job's ConfigMap `<job>-config`
TOKEN_SECONDS = 3600  # the kubelet refreshes the file at 80% of it
URL_ENV, TOKEN_ENV, CA_ENV = "MPIOP_STATUS_URL", "MPIOP_STATUS_TOKEN", "MPIOP_STATUS_CA"
# mpirun passes them on to the ranks (env.forwarding_env): the paths are the same in every pod, each its own token.
FORWARDED = (URL_ENV, TOKEN_ENV, CA_ENV)


@dataclass(frozen=True)
class StatusEndpoint:
    """Where pods post: mpiop's endpoint base URL (e.g. https://mpiop-status.mpiop-system.svc:8443) and its CA."""

    url: str
    ca_pem: str


def path(namespace: str, name: str) -> str:
    """The job's status path, Trainer's with kubeflow.org/v2beta1 mpijobs."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"


def opted_out(job: MPIJob) -> bool:
    return job.metadata.annotations.get(names.REPORT_PROGRESS_ANNOTATION) == "false"


def enabled(job: MPIJob, endpoint: StatusEndpoint | None) -> bool:
    return endpoint is not None and not opted_out(job)


def forwarded(job: MPIJob, endpoint: StatusEndpoint | None) -> tuple[str, ...]:
    """The variables the launcher's mpirun must pass on to the ranks."""
    return FORWARDED if enabled(job, endpoint) else ()


def config_map_data(job: MPIJob, endpoint: StatusEndpoint | None) -> dict[str, str]:
    """The CA the pods trust mpiop's endpoint by, for the job's ConfigMap."""
    return {CA_KEY: endpoint.ca_pem} if endpoint is not None and enabled(job, endpoint) else {}


def add_to_pod(pod: dict[str, Any], job: MPIJob, endpoint: StatusEndpoint | None) -> None:
    """The token and CA volume in every container, and the variables saying where and how to post."""
    if endpoint is None or not enabled(job, endpoint):
        return
    spec = pod["spec"]
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == VOLUME for v in volumes):
        volumes.append({"name": VOLUME, "projected": {"sources": [
            {"serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}},
            {"configMap": {"name": names.config_map_name(job), "items": [{"key": CA_KEY, "path": "ca.crt"}]}},
        ]}})
    variables = [{"name": URL_ENV, "value": endpoint.url.rstrip("/") + path(job.metadata.namespace,
                                                                              job.metadata.name)},
                 {"name": TOKEN_ENV, "value": f"{MOUNT_PATH}/token"},
                 {"name": CA_ENV, "value": f"{MOUNT_PATH}/ca.crt"}]
    for container in spec.get("containers") or []:
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("name") == VOLUME for m in mounts):
            mounts.append({"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True})
        container["env"] = env.merge_env(container.get("env"), variables)
