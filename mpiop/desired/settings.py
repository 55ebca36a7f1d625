"""The operator's flags that shape a job's objects, as one value: what `decide` reads besides the job,
what it observed and the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpiop.desired.gpus import DEFAULT_GPU_DEVICE_CLASSES
from mpiop.desired.hostnetwork import DEFAULT_PORT_RANGE, PortRange
from mpiop.desired.launch import DEFAULT_KUBECTL_IMAGE, DEFAULT_LAUNCH, LaunchMode
from mpiop.desired.podgroup import GangScheduler
from mpiop.desired.status_report import StatusEndpoint


@dataclass(frozen=True)
class Settings:
    cluster_domain: str = ""  # --cluster-domain: the hostfile's names end in it ('' leaves them to the search path)
    port_range: PortRange = DEFAULT_PORT_RANGE  # --host-network-port-range: SSH ports of host-network pods
    gang_scheduler: GangScheduler | None = None  # --gang-scheduling: whose PodGroup a job's pods join, if any
    discover_hosts: bool = True  # False (--no-discover-hosts): discover_hosts.sh is a fixed script, never patched
    # --max-disruption-restarts: restarts after an eviction or preemption that spend no backoffLimit, per job
    max_disruption_restarts: int = 10
    kept_attempts: int = 3  # --kept-attempts: a job's last failed attempts whose logs stay in ConfigMaps
    node_fault_exit_codes: frozenset[int] = frozenset()  # --node-fault-exit-codes: exits that blame the node
    max_excluded_nodes: int = 8  # --max-excluded-nodes: how many nodes a job's next attempts avoid at most
    default_launch: LaunchMode = DEFAULT_LAUNCH  # --default-launch: for jobs without the launch annotation
    kubectl_image: str = DEFAULT_KUBECTL_IMAGE  # --kubectl-image: where exec launchers get kubectl from
    # --kubectl-image-grace-seconds: how long an exec job waits for that image to be pulled before it fails
    kubectl_image_grace_seconds: int = 300
    # --gpu-layout-max-entries: the most tolerations, nodeSelector or required node affinity entries of a Worker
    # template that a total-GPU layout matches against the nodes (policies/node_fit); a job over it waits
    gpu_layout_max_entries: int = 1000
    # --max-mpijob-kib: an MPIJob's JSON (managedFields and kubectl's last-applied-configuration aside) over this is
    # cached cut and failed (policies/cached_size). 512 KiB: a hundred times a common job (~5 KB), four times one
    # with a thousand environment variables in each template, a third of what etcd takes (1.5 MiB).
    max_mpijob_kib: int = 512
    # --gpu-device-classes: DRA device classes whose devices a worker's claims count as GPUs, so as slots
    # (desired.gpus); empty: claims count none and ResourceClaimTemplates are not watched
    gpu_device_classes: frozenset[str] = DEFAULT_GPU_DEVICE_CLASSES
    # --stop-grace-seconds: how long a suspend, a disruption restart or activeDeadlineSeconds waits for the launcher
    # (told by SIGTERM) to end before its workers are deleted; 0: all at once (policies/graceful_stop)
    stop_grace_seconds: int = 0
    # --max-stop-grace-seconds: the longest any job's stop grace may be, whatever its annotation and pod templates
    # ask: a tenant's preempted job holds its quota and GPUs no longer than this (policies/graceful_stop)
    max_stop_grace_seconds: int = 600
    # mpiop's status endpoint and its CA, for the pods to report progress to; None: --no-status-endpoint
    status_endpoint: StatusEndpoint | None = None


DEFAULT_SETTINGS = Settings()
