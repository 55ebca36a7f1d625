"""The Secret, ConfigMap and headless Service an MPIJob owns, as pure functions of the job."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from mpiop import names
from mpiop.api.v2beta1 import MPIJob
from mpiop.desired import hostfile, hostnetwork, kubexec, ssh_config, status_report
from mpiop.desired.status_report import StatusEndpoint


def ssh_secret(job: MPIJob, private_key: bytes, public_key: bytes) -> dict[str, Any]:
    """kubernetes.io/ssh-auth, immutable: the key pair is made once per job and never rotated mid-run."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": names.owned_metadata(job, names.ssh_secret_name(job), names.supporting_labels(job)),
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "data": {
            "ssh-privatekey": base64.b64encode(private_key).decode(),
            "ssh-publickey": base64.b64encode(public_key).decode(),
        },
    }


def config_map_data(job: MPIJob, running_worker_indexes: Iterable[int], cluster_domain: str = "",
                    ports: hostnetwork.Ports = hostnetwork.NO_PORTS, discover_hosts: bool = True,
                    exec_launch: bool = False, status_endpoint: StatusEndpoint | None = None) -> dict[str, str]:
    """The hostfile, discover_hosts.sh, with host-network ports the SSH client config naming them, and under exec
    launch mpirun's remote agent kubexec.sh.

    `discover_hosts` False (--no-discover-hosts): discover_hosts.sh is a fixed script that says it is off.
    """
    data = {
        names.HOSTFILE_NAME: hostfile.hostfile(job, cluster_domain),
        names.DISCOVER_HOSTS_NAME: (hostfile.discover_hosts(job, running_worker_indexes, cluster_domain)
                                    if discover_hosts else hostfile.DISCOVER_HOSTS_OFF),
    }
    if ports:
        data[ssh_config.NAME] = ssh_config.render(job, ports, cluster_domain)
    if exec_launch:
        data[kubexec.SCRIPT_NAME] = kubexec.SCRIPT
    data.update(status_report.config_map_data(job, status_endpoint))  # the CA of mpiop's status endpoint
    return data


def config_map(job: MPIJob, running_worker_indexes: Iterable[int], cluster_domain: str = "",
               ports: hostnetwork.Ports = hostnetwork.NO_PORTS, discover_hosts: bool = True,
               exec_launch: bool = False, status_endpoint: StatusEndpoint | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.owned_metadata(job, names.config_map_name(job), names.supporting_labels(job)),
        "data": config_map_data(job, running_worker_indexes, cluster_domain, ports, discover_hosts, exec_launch,
                                status_endpoint),
    }


def service(job: MPIJob) -> dict[str, Any]:
    """Headless, and publishing not-ready pods, so every hostfile name resolves as soon as its pod exists."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.owned_metadata(job, names.service_name(job), names.supporting_labels(job)),
        "spec": {
            "clusterIP": "None",
            "selector": names.job_labels(job),
            "publishNotReadyAddresses": True,
        },
    }
