"""`mpiop run`'s flags: what each means, its default (read from the dataclass the flag fills, so help and code agree)
and how they turn into the manager's, the elector's and the servers' configuration. Kept apart from mpiop/process.py,
the process around the manager, so that each reads on its own."""

from __future__ import annotations

import argparse
import os
import re
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

from mpiop.controller.manager import ManagerConfig
from mpiop.desired.hostnetwork import PortRange
from mpiop.desired.launch import LAUNCH_MODES
from mpiop.desired.podgroup import gang_scheduler
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.leader import ElectionConfig
from mpiop.names import LAUNCH_ANNOTATION, STOP_GRACE_ANNOTATION
from mpiop.server import Limits
from mpiop.serving import layout_webhook, status_ca, status_endpoint
from mpiop.serving.token_reviews import ReviewLimits

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Where the flags' defaults live (the help text reads them): each once, in the value the flag fills.
_CONFIG, _SETTINGS = ManagerConfig(), DEFAULT_SETTINGS
_ELECTION = ElectionConfig(namespace="", name="", identity="")
_LIMITS, _REVIEWS, _WEBHOOK = Limits(), ReviewLimits(), layout_webhook.WebhookLimits()
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")


def duration(text: str) -> float:
    """Seconds from '15s', '500ms', '1m', '1h' or a plain number of seconds (client-go style flags)."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 15s, 500ms, 1m)")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2) or "s"]
    return float(match.group(1)) * scale


def _port_range(text: str) -> PortRange:
    try:
        return PortRange.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= minimum, else an error naming the flag and what it got."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"not a whole number >= {minimum}: {text!r}")
        return value
    return parse


def _positive(text: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a number > 0: {text!r}")
    return value


def _exit_codes(text: str) -> frozenset[int]:
    """`74,75`: exit codes from 1 to 255."""
    codes = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if not part.isdigit() or not 1 <= int(part) <= 255:
            raise argparse.ArgumentTypeError(f"not an exit code from 1 to 255: {part!r}")
        codes.add(int(part))
    return frozenset(codes)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--namespace", default=None,
                        help="watch one namespace (default: all namespaces)")
    # Reconciles wait on the apiserver, not the CPU: at 8, a sustained 5 jobs/s on a loaded apiserver (0.3 s a
    # request) queued 500 keys behind 8 busy workers at 5% CPU. Coroutines are cheap; the 32 pod writes in
    # flight and the apiserver's fairness bound the load.
    parser.add_argument("--workers", type=int, default=_CONFIG.workers, help="reconcile workers (default %(default)s)")
    # Off by default, as in controller-runtime since v0.21: mpiop bounds itself by concurrency (workers, 32 pod
    # writes in flight, --kube-api-burst connections) and the apiserver's Priority and Fairness does the rest. At
    # 50 QPS a 200-job burst took 5x the apiserver's own time (docs/bench.md, the qps50 phase).
    parser.add_argument("--kube-api-qps", type=float, default=0.0,
                        help="client-side QPS limit to the apiserver; 0 turns the limiter off (default %(default)g)")
    parser.add_argument("--kube-api-burst", type=int, default=100,
                        help="client-side burst, and at least this many connections to the apiserver "
                             "(default %(default)s)")
    parser.add_argument("--log-format", choices=("json", "console"), default="console",
                        help="json: one JSON object a line (in a cluster); console: for humans (default)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--cluster-domain", default=_SETTINGS.cluster_domain,
                        help="append this domain to hostfile names, e.g. cluster.local "
                             f"(default: {_SETTINGS.cluster_domain or 'none'})")
    parser.add_argument("--host-network-port-range", type=_port_range, default=_SETTINGS.port_range,
                        metavar="FIRST-LAST",
                        help="host ports for the sshd (and MASTER_PORT) of hostNetwork pods, one per pod "
                             "(default %(default)s)")
    parser.add_argument("--gang-scheduling", default="", metavar="NAME",
                        help="gang-schedule every job with a PodGroup: 'kubernetes' (the default scheduler's own "
                             "gangs, scheduling.k8s.io/v1beta1: Kubernetes v1.37+ with the GenericWorkload gate; "
                             "one PodGroup per attempt), 'volcano', or the schedulerName of a scheduler-plugins "
                             "Coscheduling profile (e.g. scheduler-plugins-scheduler); empty: off (default)")
    # Both default to kubeflow's behaviour; turned off, an 8-worker job's life costs 16 requests instead of 20.
    parser.add_argument("--lifecycle-events", action=argparse.BooleanOptionalAction, default=_CONFIG.lifecycle_events,
                        help="send the Normal Events every job has (MPIJobCreated, MPIJobRunning, "
                             "MPIJobSucceeded), as kubeflow does; off: they are only logged "
                             f"(default {_on_off(_CONFIG.lifecycle_events)})")
    parser.add_argument("--discover-hosts", action=argparse.BooleanOptionalAction, default=_SETTINGS.discover_hosts,
                        help="keep discover_hosts.sh (elastic Horovod) listing the Running workers, as kubeflow "
                             "does; off: it is a script that fails saying so, and is never patched "
                             f"(default {_on_off(_SETTINGS.discover_hosts)})")
    parser.add_argument("--max-disruption-restarts", type=_at_least(0), default=_SETTINGS.max_disruption_restarts,
                        metavar="N",
                        help="restarts per job after a pod was evicted or preempted (its DisruptionTarget condition) "
                             "that do not count against backoffLimit; past N they do (default %(default)s)")
    parser.add_argument("--stop-grace-seconds", type=_at_least(0), default=_SETTINGS.stop_grace_seconds,
                        metavar="S",
                        help="at a suspend, a disruption restart or activeDeadlineSeconds, delete the launcher first "
                             "(SIGTERM to mpirun) and its workers once it ended or S seconds passed, so the ranks can "
                             "checkpoint; capped at the pods' terminationGracePeriodSeconds and "
                             "--max-stop-grace-seconds; per job: annotation "
                             f"{STOP_GRACE_ANNOTATION}; 0: all pods at once (default %(default)s)")
    parser.add_argument("--max-stop-grace-seconds", type=_at_least(0), default=_SETTINGS.max_stop_grace_seconds,
                        metavar="S",
                        help="the longest stop grace of any job, whatever its annotation and pods' "
                             "terminationGracePeriodSeconds ask: a preempted job holds its quota and GPUs no longer "
                             "(default %(default)s)")
    parser.add_argument("--kept-attempts", type=_at_least(1), default=_SETTINGS.kept_attempts, metavar="K",
                        help="keep the logs of each job's last K failed attempts in ConfigMaps <job>-attempt-<n> "
                             "(default %(default)s)")
    parser.add_argument("--node-fault-exit-codes", type=_exit_codes, default=_SETTINGS.node_fault_exit_codes,
                        metavar="CODES",
                        help="comma-separated exit codes (1-255) that mean the node is at fault: an attempt failing "
                             "with one avoids that node from then on "
                             f"(default: {','.join(map(str, sorted(_SETTINGS.node_fault_exit_codes))) or 'none'})")
    parser.add_argument("--max-excluded-nodes", type=_at_least(0), default=_SETTINGS.max_excluded_nodes, metavar="N",
                        help="nodes a job's next attempts avoid at most, the most recent kept; 0: none "
                             "(default %(default)s)")
    parser.add_argument("--default-launch", choices=LAUNCH_MODES, default=_SETTINGS.default_launch,
                        help=f"how mpirun reaches the workers of a job without the {LAUNCH_ANNOTATION} annotation: "
                             "'ssh' (sshd in the workers, as kubeflow) or 'exec' (the Kubernetes exec API, no sshd; "
                             "mpiop's role then needs deploy/overlays/exec-launch) (default %(default)s)")
    parser.add_argument("--kubectl-image", default=_SETTINGS.kubectl_image,
                        help="image an exec launcher's init container copies kubectl from "
                             "(default %(default)s)")
    parser.add_argument("--kubectl-image-grace-seconds", type=_at_least(0),
                        default=_SETTINGS.kubectl_image_grace_seconds, metavar="SECONDS",
                        help="an exec job whose launcher cannot pull --kubectl-image waits this long after the "
                             "launcher was made (a registry can come back), then fails (default %(default)s)")
    parser.add_argument("--gpu-layout", action=argparse.BooleanOptionalAction, default=_CONFIG.gpu_layout,
                        help="watch the nodes that have GPUs (list/watch nodes) to lay out jobs that state their "
                             "total (spec.gpus); off (a namespaced Role cannot list nodes): such jobs wait saying "
                             f"so (default {_on_off(_CONFIG.gpu_layout)})")
    parser.add_argument("--gpu-layout-max-entries", type=_at_least(0), default=_SETTINGS.gpu_layout_max_entries,
                        metavar="N",
                        help="a total-GPU job's Worker template is matched against the nodes only with at most N "
                             "tolerations, N nodeSelector entries and N required node affinity entries (terms, "
                             "expressions, values); over it the job waits saying so (default %(default)s)")
    parser.add_argument("--max-mpijob-kib", type=_at_least(1), default=_SETTINGS.max_mpijob_kib, metavar="KIB",
                        help="an MPIJob whose JSON (managedFields and kubectl's last-applied-configuration aside) "
                             "is larger is kept cut to what failing it needs, and fails with ValidationError "
                             "naming this flag (default %(default)s)")
    parser.add_argument("--gpu-layout-webhook", default=layout_webhook.CONFIGURATION, metavar="NAME",
                        help="the MutatingWebhookConfiguration whose webhook lays such jobs out as they are created "
                             "(served with the status endpoint, by the leader, which writes its CA there); '' turns "
                             "it off: the controller lays them out after they are created (default %(default)s)")
    parser.add_argument("--gpu-layout-client-ca", default="", metavar="PEM_FILE",
                        help="the CA of the client certificate the apiserver presents to the webhook (its "
                             "AdmissionConfiguration's kubeConfigFile): the webhook then answers only a client whose "
                             "certificate it signed, anyone else a 403 before the body is read; the status endpoint "
                             "asks for a client certificate, and the pods' posts without one still go through "
                             "(default: none, the webhook answers anyone, saying nothing of the nodes)")
    parser.add_argument("--gpu-layout-per-source-qps", type=_positive, default=_WEBHOOK.per_source_qps, metavar="QPS",
                        help="AdmissionReviews a second the webhook takes from one address; past it (and its burst) "
                             "a 429 with Retry-After, and the job is laid out after it is created "
                             "(default %(default)g)")
    parser.add_argument("--gpu-layout-per-source-burst", type=_at_least(1), default=_WEBHOOK.per_source_burst,
                        metavar="N", help="AdmissionReviews the webhook takes from one address at once "
                                          "(default %(default)s)")
    parser.add_argument("--gpu-device-classes", default=_SETTINGS.gpu_device_classes, metavar="CLASSES",
                        type=lambda text: frozenset(filter(None, map(str.strip, text.split(",")))),
                        help="comma-separated DRA DeviceClasses whose devices a worker's claims count as GPUs, and so "
                             "as slots (list/watch resourceclaimtemplates); empty: claims count none "
                             f"(default {','.join(sorted(_SETTINGS.gpu_device_classes))})")
    status = parser.add_argument_group("progress reports (the status endpoint the jobs' pods post to)")
    status.add_argument("--status-endpoint", action=argparse.BooleanOptionalAction, default=True,
                        help="serve the endpoint where a job's pods post their progress (status.trainerStatus), and "
                             "give every pod a token and CA for it; off: no endpoint, no token (default on)")
    status.add_argument("--status-addr", default=status_endpoint.ADDR,
                        help="address the status endpoint listens on, HTTPS ([host]:port; default %(default)s)")
    status.add_argument("--status-url", default=status_endpoint.URL,
                        help="the endpoint's URL as the pods reach it (its host goes in the serving certificate; "
                             "default %(default)s, the manifests' Service)")
    status.add_argument("--status-ca-secret", default=status_ca.SECRET, metavar="[NAMESPACE/]NAME",
                        help="the Secret (kubernetes.io/tls) holding the endpoint's CA, which every replica and "
                             "restart serves under, so the jobs' ConfigMaps keep theirs; made by the first process "
                             "(secrets get, create, update; NAMESPACE: $POD_NAMESPACE, else the pod's own). '', or "
                             "outside a cluster without NAMESPACE: a CA of this process's own (default %(default)s)")
    status.add_argument("--status-write-seconds", type=float, default=status_endpoint.WRITE_SECONDS, metavar="SECONDS",
                        help="write a job's reported progress at most this often, the posts in between coalesced "
                             "(default %(default)g)")
    # Every pod of every tenant can reach the endpoint: what one may hold of it (docs/security.md, "Status endpoint
    # limits"). The probes' and /metrics' servers take the connection and header limits too.
    status.add_argument("--status-max-connections", type=_at_least(1), default=_LIMITS.max_connections, metavar="N",
                        help="connections open at once; one more is closed at once (default %(default)s)")
    status.add_argument("--status-max-connections-per-source", type=_at_least(1),
                        default=_LIMITS.max_connections_per_source, metavar="N",
                        help="connections open at once from one address (a pod; a node, for hostNetwork pods); one "
                             "more is closed at once (default %(default)s)")
    status.add_argument("--status-connections-per-source-qps", type=_positive,
                        default=_LIMITS.connections_per_source_qps, metavar="QPS",
                        help="new connections a second from one address, past its burst; one more is closed at once, "
                             "before TLS (default %(default)g)")
    status.add_argument("--status-connections-per-source-burst", type=_at_least(1),
                        default=_LIMITS.connections_per_source_burst, metavar="N",
                        help="new connections one address may open at once (default %(default)s)")
    status.add_argument("--status-idle-seconds", type=_positive, default=_LIMITS.idle_seconds, metavar="SECONDS",
                        help="a connection that has not finished its TLS handshake, or sent a whole request's headers, "
                             "this long after it opened or after its last answer is closed (default %(default)g)")
    status.add_argument("--status-max-headers", type=_at_least(1), default=_LIMITS.max_headers, metavar="N",
                        help="header lines one request may have; more is a 400 (default %(default)s)")
    status.add_argument("--status-max-header-bytes", type=_at_least(1024), default=_LIMITS.max_header_bytes,
                        metavar="BYTES",
                        help="bytes of the request line and of each header line; more is a 400 (default %(default)s)")
    status.add_argument("--status-request-seconds", type=_positive, default=_LIMITS.request_seconds,
                        metavar="SECONDS",
                        help="once a request's headers are in, the time it has to send its body and be answered "
                             "(its token reviewed); then a 408 (default %(default)g)")
    status.add_argument("--status-body-bytes-in-flight", type=_at_least(1024 * 1024),
                        default=_LIMITS.body_bytes_in_flight, metavar="BYTES",
                        help="bytes of request bodies read at once, all connections together (each body counted as "
                             "declared, else as its route's limit); one that does not fit within 1s is a 503 with "
                             "Retry-After (default %(default)s)")
    status.add_argument("--status-review-in-flight", type=_at_least(1), default=_REVIEWS.in_flight, metavar="N",
                        help="TokenReviews of posted tokens at once, on a client of their own (default %(default)s)")
    status.add_argument("--status-review-per-source-qps", type=_positive, default=_REVIEWS.per_source_qps,
                        metavar="QPS",
                        help="TokenReviews a second that the posts of one address may cause (tokens not cached); past "
                             "it (and its burst) a 429 with Retry-After (default %(default)g)")
    status.add_argument("--status-review-per-source-burst", type=_at_least(1), default=_REVIEWS.per_source_burst,
                        metavar="N",
                        help="TokenReviews the posts of one address may cause at once (default %(default)s)")
    status.add_argument("--status-review-queue", type=_at_least(1), default=_REVIEWS.queue, metavar="N",
                        help="TokenReviews under way or waiting for their turn; past it a 503 with Retry-After "
                             "(default %(default)s)")
    status.add_argument("--status-token-cache-size", type=_at_least(1), default=_REVIEWS.cache_size, metavar="N",
                        help="tokens whose review is kept: N accepted (60 s), N refused (10 s), each dropping the "
                             "least recently used; and the budgets of N addresses (default %(default)s)")
    parser.add_argument("--resync-seconds", type=float, default=_CONFIG.resync_seconds,
                        help="re-reconcile every job this often (default %(default)gs)")
    parser.add_argument("--pod-event-batch-seconds", type=float, default=_CONFIG.pod_event_batch_seconds,
                        metavar="SECONDS",
                        help="a pod's event queues its job's pass this much later, so the events of a job's pods "
                             "in that time cost one pass (0: at once; default %(default)gs)")
    parser.add_argument("--field-manager", default="mpiop",
                        help="name recorded in managedFields for this process's writes (default %(default)s)")
    parser.add_argument("--health-addr", default=":8081",
                        help="address of /healthz and /readyz ([host]:port; 0 turns it off; default %(default)s)")
    parser.add_argument("--metrics-addr", default=":8080",
                        help="address of /metrics ([host]:port; 0 turns it off; default %(default)s)")
    election = parser.add_argument_group("leader election (a coordination.k8s.io/v1 Lease)")
    election.add_argument("--leader-elect", action="store_true",
                          help="only the holder of the lease reconciles; run this with more than one replica")
    election.add_argument("--leader-elect-lease-duration", type=duration, default=_ELECTION.lease_duration,
                          metavar="DURATION",
                          help="how long standbys wait after the last renewal before taking over "
                               "(default %(default)gs)")
    election.add_argument("--leader-elect-renew-deadline", type=duration, default=_ELECTION.renew_deadline,
                          metavar="DURATION",
                          help="the leader stops if it could not renew for this long (default %(default)gs)")
    election.add_argument("--leader-elect-retry-period", type=duration, default=_ELECTION.retry_period,
                          metavar="DURATION",
                          help="how often to renew, or to try to acquire (default %(default)gs)")
    election.add_argument("--leader-elect-namespace", default=None,
                          help="namespace of the Lease (default: $POD_NAMESPACE, else the pod's own namespace)")
    election.add_argument("--leader-elect-id", default="mpiop", help="name of the Lease (default %(default)s)")


def config_from_args(args: argparse.Namespace) -> ManagerConfig:
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    settings = Settings(cluster_domain=args.cluster_domain, port_range=args.host_network_port_range,
                        gang_scheduler=gang_scheduler(args.gang_scheduling), discover_hosts=args.discover_hosts,
                        max_disruption_restarts=args.max_disruption_restarts, kept_attempts=args.kept_attempts,
                        node_fault_exit_codes=args.node_fault_exit_codes, max_excluded_nodes=args.max_excluded_nodes,
                        default_launch=args.default_launch, kubectl_image=args.kubectl_image,
                        kubectl_image_grace_seconds=args.kubectl_image_grace_seconds,
                        gpu_layout_max_entries=args.gpu_layout_max_entries, max_mpijob_kib=args.max_mpijob_kib,
                        gpu_device_classes=args.gpu_device_classes,
                        stop_grace_seconds=args.stop_grace_seconds,
                        max_stop_grace_seconds=args.max_stop_grace_seconds)
    return ManagerConfig(namespace=args.namespace or None, workers=args.workers, resync_seconds=args.resync_seconds,
                         lifecycle_events=args.lifecycle_events, gpu_layout=args.gpu_layout,
                         pod_event_batch_seconds=args.pod_event_batch_seconds, settings=settings)


def own_namespace() -> str:
    """The namespace this process runs in: $POD_NAMESPACE, else its pod's ServiceAccount's; '' outside a cluster."""
    namespace = os.environ.get("POD_NAMESPACE", "")
    if not namespace and SA_NAMESPACE_FILE.is_file():
        namespace = SA_NAMESPACE_FILE.read_text().strip()
    return namespace


def election_from_args(args: argparse.Namespace) -> ElectionConfig | None:
    """The leader election settings, or None without --leader-elect; exits on impossible timings."""
    if not args.leader_elect:
        return None
    namespace = args.leader_elect_namespace or own_namespace()
    if not namespace:
        raise SystemExit("--leader-elect needs --leader-elect-namespace outside a cluster")
    # Unique per process, like client-go's hostname_uuid: a restarted pod is a new candidate.
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"
    config = ElectionConfig(namespace=namespace, name=args.leader_elect_id, identity=identity,
                            lease_duration=args.leader_elect_lease_duration,
                            renew_deadline=args.leader_elect_renew_deadline,
                            retry_period=args.leader_elect_retry_period)
    try:
        config.validate()
    except ValueError as error:
        raise SystemExit(f"leader election: {error}") from None
    return config
