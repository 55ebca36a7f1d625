"""The launcher and worker Pods an MPIJob wants: pure functions of (job, index, attempt).

The user's template is the base; mpiop adds the identity (name, hostname + subdomain so the headless
Service gives each pod a DNS name, and the job's DNS search domain so bare pod names resolve too), kubeflow's
labels, the SSH key and hostfile volumes, the launcher's MPI environment and the framework presets
(MASTER_ADDR...; forwarded to the ranks by the launcher). Under exec launch, no SSH key: desired.kubexec.
Whatever the user set in the template wins.
"""

from __future__ import annotations

import copy
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import DEFAULT_SSH_AUTH_MOUNT_PATH, MPIJob, ReplicaSpec
from mpiop.desired import affinity, env, hostnetwork, kubexec, launch, presets, ssh_config, status_report
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings

SSH_VOLUME = "ssh-auth"
CONFIG_VOLUME = "mpi-job-config"
WORKER_DEFAULT_COMMAND = ["/usr/sbin/sshd", "-De"]


def pod_restart_policy(replica: ReplicaSpec) -> str:
    """ExitCode is decided by mpiop from the exit code, so the kubelet must not restart: Never."""
    policy = replica.restart_policy or replica.template.get("spec", {}).get("restartPolicy") or "Never"
    return "Never" if policy == "ExitCode" else str(policy)


def _ssh_volume(job: MPIJob) -> dict[str, Any]:
    """The key Secret's files; 0600 only in root's home, as kubeflow does.

    The files belong to root. ssh refuses a key its own user can share with others (so root needs 0600), but
    accepts a readable key owned by somebody else: a non-root user needs the default 0644 (or an fsGroup).
    """
    secret: dict[str, Any] = {
        "secretName": names.ssh_secret_name(job),
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    }
    if job.spec.effective_ssh_auth_mount_path == DEFAULT_SSH_AUTH_MOUNT_PATH:  # root's home
        secret["defaultMode"] = 0o600
    return {"name": SSH_VOLUME, "secret": secret}


def _host_network_dns(spec: dict[str, Any]) -> None:
    """A host-network pod resolves with the node's DNS unless told otherwise; the job's names need the cluster's.

    As kubeflow (and KubeDL's host-network mode) do; a dnsPolicy the user chose is kept.
    """
    if spec.get("hostNetwork") and not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"


def _no_default_token(spec: dict[str, Any]) -> None:
    """MPI pods do not call the Kubernetes API: no token of the namespace's default ServiceAccount is mounted
    unless the template names a ServiceAccount or sets automountServiceAccountToken itself."""
    named = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if not named and "automountServiceAccountToken" not in spec:
        spec["automountServiceAccountToken"] = False


def _add_search_domain(spec: dict[str, Any], domain: str) -> None:
    searches = spec.setdefault("dnsConfig", {}).setdefault("searches", [])
    if domain not in searches:
        searches.append(domain)


def _config_volume(job: MPIJob, exec_launch: bool = False) -> dict[str, Any]:
    items = [
        {"key": names.HOSTFILE_NAME, "path": names.HOSTFILE_NAME, "mode": 0o444},
        {"key": names.DISCOVER_HOSTS_NAME, "path": names.DISCOVER_HOSTS_NAME, "mode": 0o555},
    ]
    if exec_launch:
        items.append({"key": kubexec.SCRIPT_NAME, "path": kubexec.SCRIPT_NAME, "mode": 0o555})
    if hostnetwork.ssh_pods(job):
        items.append({"key": ssh_config.NAME, "path": ssh_config.NAME, "mode": 0o444})
    return {"name": CONFIG_VOLUME, "configMap": {"name": names.config_map_name(job), "items": items}}


def _add_volume(spec: dict[str, Any], volume: dict[str, Any], mount_path: str) -> None:
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == volume["name"] for v in volumes):
        volumes.append(volume)
    main = spec["containers"][0]
    mounts = main.setdefault("volumeMounts", [])
    if not any(m.get("name") == volume["name"] for m in mounts):
        mounts.append({"name": volume["name"], "mountPath": mount_path})


def _base_pod(job: MPIJob, replica: ReplicaSpec, name: str, labels: dict[str, str],
              cluster_domain: str, hostname: str | None = None, ssh: bool = True) -> dict[str, Any]:
    template = copy.deepcopy(replica.template)
    meta = template.get("metadata") or {}
    spec: dict[str, Any] = template.get("spec") or {}
    spec.setdefault("containers", [{}])
    spec["hostname"] = hostname or name
    spec["subdomain"] = names.service_name(job)
    spec["restartPolicy"] = pod_restart_policy(replica)
    _host_network_dns(spec)
    _no_default_token(spec)
    _add_search_domain(spec, names.search_domain(job, cluster_domain))
    if ssh:
        _add_volume(spec, _ssh_volume(job), job.spec.effective_ssh_auth_mount_path)
    affinity.exclude_nodes(spec, job.status.excluded_nodes or [])
    metadata = names.owned_metadata(job, name, labels={**(meta.get("labels") or {}), **labels})
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _master_port(job: MPIJob, ports: hostnetwork.Ports) -> int:
    """MASTER_PORT: torch's default, or on the host network the port rank 0's pod holds for it."""
    return hostnetwork.master_port(job, ports) or presets.DEFAULT_MASTER_PORT


def worker_pod(job: MPIJob, index: int, attempt: int, cluster_domain: str = "",
               ports: hostnetwork.Ports = hostnetwork.NO_PORTS,
               settings: Settings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """`ports`: the attempt's host-network port table (policies/host_ports), for host-network workers."""
    replica = job.spec.worker
    assert replica is not None, "worker_pod needs a Worker replica spec"
    labels = names.role_labels(job, names.WORKER_ROLE, names.worker_label_index(job, index), attempt)
    exec_launch = launch.uses_exec(job, settings.default_launch)
    pod = _base_pod(job, replica, names.worker_name(job, index), labels, cluster_domain, ssh=not exec_launch)
    ssh_port = hostnetwork.add_ports(pod, job, ports)
    main = pod["spec"]["containers"][0]
    if exec_launch:
        kubexec.worker_pod(pod)
        # Open MPI passes the launcher's MCA variables on to each orted, which checks that the agent exists.
        _add_volume(pod["spec"], _config_volume(job, exec_launch), names.CONFIG_MOUNT_PATH)
    elif not main.get("command") and not main.get("args"):
        main["command"] = list(WORKER_DEFAULT_COMMAND) + (["-p", str(ssh_port)] if ssh_port is not None else [])
    framework = presets.presets(job, cluster_domain, _master_port(job, ports))
    main["env"] = env.merge_env(main.get("env"), env.worker_env(ssh_port) + framework)
    status_report.add_to_pod(pod, job, settings.status_endpoint)
    return pod


def launcher_pod(job: MPIJob, attempt: int, cluster_domain: str = "",
                 ports: hostnetwork.Ports = hostnetwork.NO_PORTS,
                 settings: Settings = DEFAULT_SETTINGS) -> dict[str, Any]:
    replica = job.spec.launcher
    assert replica is not None, "launcher_pod needs a Launcher replica spec"
    exec_launch = launch.uses_exec(job, settings.default_launch)
    pod = _base_pod(job, replica, names.launcher_name(job, attempt), names.launcher_labels(job, attempt),
                    cluster_domain, hostname=names.launcher_name(job), ssh=not exec_launch)
    ssh_port = hostnetwork.add_ports(pod, job, ports)  # a host-network launcher that also works
    _add_volume(pod["spec"], _config_volume(job, exec_launch), names.CONFIG_MOUNT_PATH)
    main = pod["spec"]["containers"][0]
    added = env.launcher_env(job)
    if exec_launch:
        kubexec.launcher_pod(pod, job, settings.kubectl_image)
        added = [e for e in added if e["name"] not in env.SSH_ARGS_VARIABLES]
        added += env.exec_launch_env(job.spec.effective_mpi_implementation, kubexec.AGENT_PATH)
        added += kubexec.agent_env(job, attempt)
    if ssh_port is not None:
        added.append({"name": hostnetwork.SSH_PORT_ENV, "value": str(ssh_port)})
    added += env.framework_env(job, cluster_domain, _master_port(job, ports),
                               status_report.forwarded(job, settings.status_endpoint))
    main["env"] = env.merge_env(main.get("env"), added)
    status_report.add_to_pod(pod, job, settings.status_endpoint)
    return pod
