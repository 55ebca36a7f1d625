"""Deterministic names and kubeflow-compatible labels of everything an MPIJob owns.

Names are a pure function of the job, so a restarted operator finds what it made before and never
creates a duplicate. Label keys and values are kubeflow/mpi-operator's, for Kueue and existing dashboards.
"""

from __future__ import annotations

from typing import Any

from mpiop.api.v2beta1 import API_VERSION, KIND, MPIJob

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# kubeflow's label on the ConfigMap, Secret, Service (and its launcher Job): `app: <job>`; tools select by it.
APP_LABEL = "app"
# mpiop's own: which restart attempt a pod belongs to, so a failure is counted once.
ATTEMPT_LABEL = "mpiop.kubeflow.org/attempt"
# On a launcher pod: how many workers the job wanted when it was made (what its mpirun starts ranks on). A
# worker below that index made after the launcher replaces one mpirun lost; one at or above it is a scale-up.
LAUNCHED_WORKERS_LABEL = "mpiop.kubeflow.org/launched-workers"
# On a worker pod, the uid of its attempt's launcher when mpiop made the worker below that launcher's worker
# count: it replaces a worker that launcher's mpirun had. Decided when mpiop makes the pod, not read off
# creationTimestamps (whole seconds, stamped by whichever apiserver served the create). The uid, not "true": a
# launcher deleted and made again (a host port that moved) starts on the workers made before it.
REPLACEMENT_LABEL = "mpiop.kubeflow.org/replacement"
# On a host-network pod: its SSH and rendezvous ports (desired.hostnetwork); the trimmed cache keeps labels, not specs.
SSH_PORT_LABEL = "mpiop.kubeflow.org/ssh-port"
MASTER_PORT_LABEL = "mpiop.kubeflow.org/master-port"

# mpiop's annotations on an MPIJob, each read where its rule lives.
LAUNCH_ANNOTATION = "mpiop.kubeflow.org/launch"  # ssh|exec (desired.launch)
FORWARD_ENV_ANNOTATION = "mpiop.kubeflow.org/forward-env"  # variables mpirun carries to the ranks (desired.env)
EXCLUDE_FAILED_NODES_ANNOTATION = "mpiop.kubeflow.org/exclude-failed-nodes"  # "false": off (policies.node_exclusion)
PROGRESS_DEADLINE_ANNOTATION = "mpiop.kubeflow.org/progress-deadline-seconds"  # policies.stall
REPORT_PROGRESS_ANNOTATION = "mpiop.kubeflow.org/report-progress"  # "false": no status token (desired.status_report)
STOP_GRACE_ANNOTATION = "mpiop.kubeflow.org/stop-grace-seconds"  # a stop's grace (policies.graceful_stop)
# Written by mpiop on a total-GPU job (spec.gpus): the request and the layout chosen (policies.gpu_layout, and the
# layout webhook at admission).
GPU_LAYOUT_ANNOTATION = "mpiop.kubeflow.org/gpu-layout"

# On the operator's own pod while its status endpoint serves (serving.status_endpoint.OwnPod): the Service
# mpiop-status selects it, so the jobs' posts reach the leader only.
STATUS_ENDPOINT_LABEL = "mpiop.kubeflow.org/status-endpoint"
STATUS_ENDPOINT_SERVING = "serving"

OPERATOR_NAME = "mpi-operator"
OWNED_SELECTOR = f"{OPERATOR_NAME_LABEL}={OPERATOR_NAME}"

LAUNCHER_ROLE = "launcher"
WORKER_ROLE = "worker"

CONFIG_MOUNT_PATH = "/etc/mpi"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
HOSTFILE_NAME = "hostfile"
DISCOVER_HOSTS_NAME = "discover_hosts.sh"


def launcher_name(job: MPIJob, attempt: int = 0) -> str:
    """`<job>-launcher`, `<job>-launcher-<attempt>` after a restart: the failed attempt's launcher is kept (its
    log tells why) while the next one runs. The launcher's hostname is always `<job>-launcher`."""
    base = f"{job.metadata.name}-launcher"
    return base if attempt == 0 else f"{base}-{attempt}"


def worker_name(job: MPIJob, index: int) -> str:
    return f"{job.metadata.name}-worker-{index}"


def config_map_name(job: MPIJob) -> str:
    return config_map_name_for(job.metadata.name)


def config_map_name_for(job_name: str) -> str:
    """The hostfile ConfigMap of the job named `job_name` (what an owner reference says of it)."""
    return f"{job_name}-config"


def attempt_config_map_name(job: MPIJob, attempt: int) -> str:
    """`<job>-attempt-<n>`: the logs of attempt n, saved when it failed. n is what everything else of that attempt
    carries: the restartCount it ran under, its pods' ATTEMPT_LABEL, its launcher's name `<job>-launcher-<n>` (n >
    0) and status.lastFailure.attempt; the first attempt's is `<job>-attempt-0`. A ConfigMap with ATTEMPT_LABEL is
    one of these."""
    return f"{job.metadata.name}-attempt-{attempt}"


def attempt_pod_group_name(job: MPIJob, attempt: int) -> str:
    """`<job>-<n>`: the scheduling.k8s.io PodGroup of attempt n (`--gang-scheduling kubernetes`). One per attempt: a
    pod's spec.schedulingGroup is immutable and the group's PodGroupInitiallyScheduled condition never reverts, so a
    new attempt's gang is a new group. n is the attempt's restartCount, as its launcher's and saved logs' names."""
    return f"{job.metadata.name}-{attempt}"


def ssh_secret_name(job: MPIJob) -> str:
    return f"{job.metadata.name}-ssh"


# How many hex digits of the job's uid its exec launcher's names carry: 32 bits, which no tenant can pick ahead.
UID_DIGITS = 8


def launcher_account_name(job: MPIJob) -> str:
    """The exec launcher's ServiceAccount, and the Role and RoleBinding that let it exec into its own pods:
    `<job>-<first 8 hex digits of its uid>-launcher`.

    The uid is the apiserver's, known only once the job exists, so no tenant can make (or leave behind) an
    account, Role, or a binding to `system:serviceaccount:<ns>:<that name>`, ahead of it. The `-launcher` suffix
    is the one policies.launcher_accounts reserves. At most 54 + 1 + 8 + 9 = 72 characters (api.crd bounds the
    job's name), within a ServiceAccount's 253."""
    return launcher_account_name_for(job.metadata.name, job.metadata.uid or "")


def launcher_account_name_for(job_name: str, uid: str) -> str:
    """launcher_account_name of the job named `job_name` with `uid` (what an owner reference says of it)."""
    return f"{job_name}-{uid.replace('-', '')[:UID_DIGITS]}-launcher"


def legacy_launcher_account_name(job: MPIJob) -> str:
    """`<job>-launcher`: what mpiop before uid-derived names called the launcher account, Role and RoleBinding. A
    job started then keeps its launcher running as it; mpiop only keeps that Role's names current
    (desired.ensure.launcher_access) and the garbage collector deletes them with the job."""
    return f"{job.metadata.name}-launcher"


def service_name(job: MPIJob) -> str:
    return job.metadata.name


def host_name(job: MPIJob, pod_name: str, cluster_domain: str = "") -> str:
    """`<pod>.<service>.<namespace>.svc`, with the cluster domain appended when one is configured."""
    host = f"{pod_name}.{service_name(job)}.{job.metadata.namespace}.svc"
    return f"{host}.{cluster_domain}" if cluster_domain else host


def worker_label_index(job: MPIJob, index: int) -> int:
    """The replica-index label of worker `index`: 1..N with runLauncherAsWorker (the launcher is rank 0), as
    kubeflow v0.8 numbers them (Kueue's TAS reads ranks off it, with its pod-index-offset of 1); else 0..N-1."""
    return index + 1 if job.spec.run_launcher_as_worker else index


def worker_index(job: MPIJob, pod_name: str) -> int | None:
    """The `<i>` of a `<job>-worker-<i>` pod name: what a worker is, whichever way its label counts."""
    prefix = f"{job.metadata.name}-worker-"
    suffix = pod_name[len(prefix):] if pod_name.startswith(prefix) else ""
    return int(suffix) if suffix.isdigit() and str(int(suffix)) == suffix else None


def search_domain(job: MPIJob, cluster_domain: str = "") -> str:
    """`<service>.<namespace>.svc.<domain>`: in a pod's DNS search list, a bare pod name of the job resolves.

    MPICH's and Intel MPI's proxies on the workers call the launcher back by its bare hostname; kubeflow adds
    the same search domain (with `cluster.local`, the default when no cluster domain is configured).
    """
    return f"{service_name(job)}.{job.metadata.namespace}.svc.{cluster_domain or DEFAULT_CLUSTER_DOMAIN}"


def job_labels(job: MPIJob) -> dict[str, str]:
    return {OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: job.metadata.name}


def supporting_labels(job: MPIJob) -> dict[str, str]:
    """The ConfigMap's, Secret's and Service's labels: ours (the informers select by them) and kubeflow's `app`."""
    return {**job_labels(job), APP_LABEL: job.metadata.name}


def role_labels(job: MPIJob, role: str, index: int | None = None, attempt: int = 0) -> dict[str, str]:
    labels = {**job_labels(job), JOB_ROLE_LABEL: role, ATTEMPT_LABEL: str(attempt)}
    if index is not None:
        labels[REPLICA_INDEX_LABEL] = str(index)
    return labels


def launcher_labels(job: MPIJob, attempt: int) -> dict[str, str]:
    """A launcher pod's labels, with the worker count it starts its ranks on (LAUNCHED_WORKERS_LABEL)."""
    return {**role_labels(job, LAUNCHER_ROLE, 0, attempt), LAUNCHED_WORKERS_LABEL: str(job.spec.worker_replicas)}


def selector_string(job: MPIJob, role: str | None = None) -> str:
    """The label selector of one role's pods, as replicaStatuses[].selector reports it; without a role, every
    pod of the job (a DELETE collection's)."""
    labels = {**job_labels(job), **({JOB_ROLE_LABEL: role} if role else {})}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def owner_reference(job: MPIJob) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.metadata.name,
        "uid": job.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_metadata(job: MPIJob, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": labels if labels is not None else job_labels(job),
        "ownerReferences": [owner_reference(job)],
    }


def controlled_by(job: MPIJob, obj: dict[str, Any]) -> bool:
    """Whether `obj` names this job (this uid, not just its name) as its controller, as owner_reference does."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == job.metadata.uid for r in refs)
