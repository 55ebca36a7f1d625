"""A simulated cluster: the real control plane plus kube-scheduler and KWOK managing N fake GPU nodes.

Pods are really scheduled (the pinned kube-scheduler binds them to fake nodes by their GPU, CPU and
memory capacity) and then turned Running by KWOK's Stages instead of containers, so thousands of pods
cost a few KiB each. Used by `make bench` and by tests/integration/test_simulated.py.

What KWOK runs (written to ``<workdir>/kwok.yaml``):

* KWOK's own default Stages of the pinned release, copied from its Go module: ``node-initialize`` and
  ``node-heartbeat-with-lease`` (nodes Ready, Leases renewed so the node lifecycle controller never
  taints them), ``pod-ready`` (bound Pending pods become Running and Ready), ``pod-complete`` (pods owned
  by a batch Job complete) and ``pod-delete`` (a pod being deleted is removed at once, as a kubelet would).
* mpiop's ``mpiop-pod-finish``: a Running pod labelled ``sim.mpiop.dev/finish: Succeeded`` (or ``Failed``)
  terminates after ``sim.mpiop.dev/finish-after`` (a duration, default 0s) with exit code
  ``sim.mpiop.dev/exit-code`` (default 0, or 1 when Failed). Put the label on a replica template to make
  a job's launcher finish on its own; or write the pod status directly with :func:`finished_pod_status`.

Gang scheduling is Kubernetes' own: ``feature_gates={"GenericWorkload": True}`` and the scheduling.k8s.io/v1beta1
API in ``runtime_config`` turn on the stock kube-scheduler's GangScheduling plugin (test_gang_kubernetes.py).

kube-scheduler runs with a raised client QPS (``scheduler_qps``): it stands in for a cluster of real
nodes, and its stock 50 QPS would make scheduling, not the operator under test, the bottleneck.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster import binaries, kwok
from devcluster.controlplane import ControlPlane, ControlPlaneError, free_port

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"
NODE_PREFIX = "kwok-node-"
GPU_RESOURCE = "nvidia.com/gpu"

FINISH_LABEL = "sim.mpiop.dev/finish"
FINISH_AFTER_ANNOTATION = "sim.mpiop.dev/finish-after"
EXIT_CODE_ANNOTATION = "sim.mpiop.dev/exit-code"

# Go template KWOK renders into the pod's status: every container terminated with the chosen exit code.
_FINISH_TEMPLATE = """\
{{ $now := Now }}
{{ $phase := index .metadata.labels "FINISH_LABEL" }}
{{ $code := "0" }}
{{ if eq $phase "Failed" }}{{ $code = "1" }}{{ end }}
{{ with .metadata.annotations }}{{ with index . "EXIT_CODE_ANNOTATION" }}{{ $code = . }}{{ end }}{{ end }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ $code }}
      finishedAt: {{ $now | Quote }}
      reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
      startedAt: {{ $now | Quote }}
{{ end }}
phase: {{ $phase }}
""".replace("FINISH_LABEL", FINISH_LABEL).replace("EXIT_CODE_ANNOTATION", EXIT_CODE_ANNOTATION)

_FINISH_STAGE: dict[str, Any] = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "mpiop-pod-finish"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": f'.metadata.labels["{FINISH_LABEL}"]', "operator": "In", "values": ["Succeeded", "Failed"]},
        ]},
        "delay": {
            "durationMilliseconds": 0,
            "durationFrom": {"expressionFrom": f'.metadata.annotations["{FINISH_AFTER_ANNOTATION}"]'},
        },
        "next": {"statusTemplate": _FINISH_TEMPLATE},
    },
}


def fake_node(name: str, *, gpus: int = 8, cpu: str = "96", memory: str = "1Ti", pods: int = 110) -> dict[str, Any]:
    """A Node KWOK manages (by annotation), with GPU, CPU, memory and pod capacity. With `gpus=0` it has no
    nvidia.com/gpu at all, as a node whose GPUs only a DRA driver publishes (ResourceSlices)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "1Ti",
                **({GPU_RESOURCE: str(gpus)} if gpus else {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "type": "kwok", "node-role.kubernetes.io/agent": ""},
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def finished_pod_status(containers: Sequence[str], phase: str = "Succeeded", exit_code: int | None = None,
                        now: dt.datetime | None = None) -> dict[str, Any]:
    """A pod status (for PATCH .../status) saying every container terminated, as a kubelet would write it."""
    code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": stamp},
                       {"type": "ContainersReady", "status": "False", "lastTransitionTime": stamp}],
        "containerStatuses": [{
            "name": name, "image": "sim", "imageID": "", "ready": False, "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "startedAt": stamp, "finishedAt": stamp}},
        } for name in containers],
    }


@dataclass
class SimulatedCluster:
    """ControlPlane + kube-scheduler + KWOK with `nodes` fake nodes. Context manager, or start()/stop()."""

    nodes: int = 4
    gpus_per_node: int = 8
    cpu_per_node: str = "96"
    memory_per_node: str = "1Ti"
    pods_per_node: int = 110
    workdir: Path | None = None
    tie_to_parent: bool = True
    extra_apiserver_flags: Sequence[str] = ()
    scheduler_qps: float = 1000.0
    scheduler_burst: int = 2000
    kwok_parallelism: int = 16
    # Opt-in, for the tests of alpha features (DRA device taints, DRA extended resources): on every component.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Sequence[str] = ()
    control_plane: ControlPlane = field(init=False)

    def __post_init__(self) -> None:
        self.control_plane = ControlPlane(workdir=self.workdir, controller_manager=True, scheduler=False,
                                          tie_to_parent=self.tie_to_parent,
                                          extra_apiserver_flags=self.extra_apiserver_flags,
                                          feature_gates=self.feature_gates, runtime_config=self.runtime_config)

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def server(self) -> str:
        return self.control_plane.server

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        return self.control_plane.kubectl(*args, input_text=input_text, check=check)

    def pids(self) -> list[int]:
        return self.control_plane.pids()

    def pids_by_name(self) -> dict[str, int]:
        return self.control_plane.pids_by_name()

    def __enter__(self) -> SimulatedCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> None:
        kwok_binary = kwok.kwok_binary()
        stages = kwok.kwok_stages_dir()
        scheduler = binaries.kube_binary("kube-scheduler")
        deadline = time.monotonic() + timeout
        self.control_plane.start(timeout=timeout)
        try:
            workdir = self.control_plane.workdir
            assert workdir is not None
            self._launch_scheduler(scheduler, workdir)
            self._launch_kwok(kwok_binary, stages, workdir)
            self.add_nodes(self.nodes, deadline=deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.control_plane.stop()

    # -- components --------------------------------------------------------------------------------
    def _launch_scheduler(self, binary: Path, workdir: Path) -> None:
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": self.scheduler_qps,
                                 "burst": self.scheduler_burst},
            "leaderElection": {"leaderElect": False},
        }
        path = workdir / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        self.control_plane.launch("kube-scheduler", [
            str(binary), f"--config={path}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--v=1", *self.control_plane.gate_flags(),
        ])

    def _launch_kwok(self, binary: Path, stages: Path, workdir: Path) -> None:
        documents: list[Any] = [{
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {"podPlayStageParallelism": self.kwok_parallelism,
                        "nodePlayStageParallelism": self.kwok_parallelism,
                        "nodeLeaseParallelism": self.kwok_parallelism},
        }]
        documents += [yaml.safe_load(p.read_text()) for p in sorted(stages.glob("*.yaml"))]
        documents.append(_FINISH_STAGE)
        path = workdir / "kwok.yaml"
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        self.control_plane.launch("kwok", [
            str(binary), f"--kubeconfig={self.kubeconfig}", f"--config={path}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
            "--node-lease-duration-seconds=40", "--cidr=10.128.0.0/12", "--node-ip=10.0.0.1",
        ])

    # -- nodes -------------------------------------------------------------------------------------
    def add_nodes(self, count: int, *, first: int = 0, deadline: float | None = None) -> list[str]:
        """Create `count` fake nodes and wait until they are Ready and schedulable; their names."""
        names = [f"{NODE_PREFIX}{i}" for i in range(first, first + count)]
        manifests = [fake_node(n, gpus=self.gpus_per_node, cpu=self.cpu_per_node, memory=self.memory_per_node,
                               pods=self.pods_per_node) for n in names]
        self.kubectl("create", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                "items": manifests}))
        deadline = deadline if deadline is not None else time.monotonic() + 120
        self.control_plane.wait_ready("kwok nodes", lambda: set(names) <= self.ready_nodes(), deadline)
        return names

    def ready_nodes(self) -> set[str]:
        """Fake nodes that are Ready and carry no not-ready/unreachable taint (the scheduler would skip them)."""
        listed = self.control_plane.get("/api/v1/nodes")
        ready: set[str] = set()
        for node in (listed or {}).get("items", []) if isinstance(listed, dict) else []:
            conditions = (node.get("status") or {}).get("conditions") or []
            taints = (node.get("spec") or {}).get("taints") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) and not any(
                t.get("key", "").startswith("node.kubernetes.io/") for t in taints
            ):
                ready.add(node["metadata"]["name"])
        return ready


def main() -> None:
    """`python -m devcluster.simulated [NODES]`: a simulated cluster in the foreground until Ctrl-C."""
    import sys

    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    with SimulatedCluster(nodes=nodes) as cluster:
        print(f"simulated cluster with {nodes} fake nodes; export KUBECONFIG={cluster.kubeconfig}", flush=True)
        try:
            while all(c.running() for c in cluster.control_plane.components):
                time.sleep(1)
            raise ControlPlaneError("a component exited; see " + str(cluster.control_plane.workdir))
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
