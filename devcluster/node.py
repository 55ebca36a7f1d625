"""A real single-node Kubernetes on this machine, for end-to-end tests that run real MPI programs.

Parts: the ControlPlane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), containerd + runc
(Debian's packages, with their own config, root, state and socket), the CNI plugins (bridge, host-local,
portmap, loopback) on a bridge of our own, CoreDNS on the host serving ``cluster.local`` from the apiserver
on the bridge's gateway IP (the kubelet's ``clusterDNS``), a kubelet and a kube-proxy (iptables mode)
of the pinned version. MPI itself needs only the headless Service's DNS names, which resolve to pod IPs;
kube-proxy is there for the ``kubernetes`` Service (10.96.0.1), which an operator running in-cluster
reaches the apiserver through.

Host state the node touches, all of it undone by :meth:`Node.stop` and, after a crash, by the next
:meth:`Node.start` (see ``nodehost.reset_host``): processes (children that die with us, plus containerd's
shims and the containers' processes), mounts under its directories (container rootfs, network
namespaces, secret tmpfs), the cgroup subtree ``/mpiop-e2e`` in every v1 hierarchy, the bridge and its
veths, kube-proxy's iptables chains (``kube-proxy --cleanup``), ``/var/log/containers`` links, and the
sysctls the kubelet, kube-proxy and the bridge plugin set.

Machine facts this respects (cgroup v1, no CAP_SYS_RESOURCE, no modprobe, no registry): the cgroupfs
driver with ``failCgroupV1: false``; ``restrict_oom_score_adj = true`` in containerd's CRI config (without
it every sandbox fails with runc's "can't get final child's PID from pipe"); overlayfs and br_netfilter
are built in, so nothing is loaded; every image is built locally and imported (see ``images.py``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from devcluster import binaries, diskspace, draplugin, images, nodeparts, oci
from devcluster.binaries import cache_dir
from devcluster.controlplane import Component, ControlPlane, ControlPlaneError, free_port
from devcluster.nodehost import (
    BRIDGE,
    CNI_BIN,
    GATEWAY,
    KUBELET_ROOT,
    LOCK_WAIT_SECONDS,
    MACHINE_LOCK,
    NODE_NAME,
    POD_SUBNET,
    STATE,
    MachineBusyError,
    bridge_mac,
    ip,
    make_cgroups,
    record_sysctls,
    reset_host,
    take_machine_lock,
)
from devcluster.nodehost import log as _log
from devcluster.nodeparts import coredns_binary, cri_binary, kube_proxy_binary


class NodeError(RuntimeError):
    """The node could not be brought up (or torn down)."""


@dataclass
class Node:
    """One node (control plane included) on this machine. Use as a context manager, or start()/stop().

    `workdir` keeps configs and logs (``.cache/e2e/run`` by default, emptied at start, kept after stop
    for post-mortems). `extra_images` are imported into containerd's ``k8s.io`` namespace besides the
    pause image. `keep_images`: keep containerd's image store between runs in ``.cache/e2e/containerd``
    so a second run imports nothing.
    """

    workdir: Path | None = None
    extra_images: Sequence[oci.Image] = ()
    keep_images: bool = True
    control_plane: ControlPlane | None = None
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # Another process's running node (Node.attach): this object starts and stops nothing.
    attached: bool = False
    _lock: IO[str] | None = None

    @classmethod
    def attach(cls, record: dict[str, Any]) -> Node:
        """The node another process runs, from its `attach_record()`: its workdir, control plane (kubeconfig, the
        apiserver's port, the PKI beside them) and containerd (the fixed socket); `stop()` leaves it running."""
        plane = ControlPlane(workdir=Path(record["control_plane"]), api_port=int(record["api_port"]))
        return cls(workdir=Path(record["workdir"]), keep_images=bool(record["keep_images"]), control_plane=plane,
                   attached=True)

    def attach_record(self) -> dict[str, Any]:
        """What another process needs to use this running node (`Node.attach`), as JSON-able values."""
        assert self.workdir is not None and self.control_plane is not None
        return {"workdir": str(self.workdir), "control_plane": str(self.control_plane.workdir),
                "api_port": self.control_plane.api_port, "server": self.control_plane.server,
                "kubeconfig": str(self.kubeconfig), "ca": str(self.control_plane.pki / "ca.crt"),
                "keep_images": self.keep_images}

    @property
    def kubeconfig(self) -> Path:
        assert self.control_plane is not None
        return self.control_plane.kubeconfig

    @property
    def containerd_root(self) -> Path:
        return cache_dir() / "e2e" / "containerd" if self.keep_images else KUBELET_ROOT.parent / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return STATE / "containerd.sock"

    def __enter__(self) -> Node:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- bring-up ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 300.0) -> None:
        if self.attached:
            raise NodeError("an attached node is another process's to start")
        begin = time.monotonic()
        diskspace.require_free(cache_dir() / "e2e", diskspace.NODE_START_BYTES, "starting the e2e node")
        self._take_lock()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - begin
        _log(f"node {NODE_NAME} ready in {self.timings['total']:.1f}s "
             f"({', '.join(f'{k} {v:.1f}s' for k, v in self.timings.items() if k != 'total')})")

    def _take_lock(self) -> None:
        try:
            self._lock = take_machine_lock(MACHINE_LOCK, wait=LOCK_WAIT_SECONDS)
        except MachineBusyError as busy:
            raise NodeError(str(busy)) from None

    def _step(self, name: str, action: Callable[[], None]) -> None:
        begin = time.monotonic()
        action()
        self.timings[name] = time.monotonic() - begin

    def _start(self, timeout: float) -> None:
        if os.geteuid() != 0:
            raise NodeError("the e2e node needs root (containerd, mounts, cgroups, a bridge)")
        missing = [p for p in ("containerd", "runc", "ctr", "ip", "unshare") if shutil.which(p) is None]
        if missing or not (CNI_BIN / "bridge").is_file():
            raise NodeError(f"missing {', '.join(missing) or 'CNI plugins'}: run hack/install-e2e-deps.sh")
        self.workdir = self.workdir or cache_dir() / "e2e" / "run"
        etcd_data = self.workdir / "control-plane" / "etcd-data"  # in /dev/shm; a crashed run leaves it
        if etcd_data.is_symlink():
            shutil.rmtree(etcd_data.resolve(), ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)
        (self.workdir / "logs").mkdir(parents=True)
        self._step("reset", lambda: reset_host(self.containerd_root))
        paths: dict[str, Path] = {}

        def resolve() -> None:
            paths.update(binaries.ensure_all(["kubelet", "kube-apiserver", "kube-controller-manager",
                                              "kube-scheduler", "kubectl", "etcd"]))
            paths["coredns"] = coredns_binary()
            paths["cri"] = cri_binary()
            paths["kube-proxy"] = kube_proxy_binary()

        self._step("binaries", resolve)
        pause: list[oci.Image] = []
        self._step("images", lambda: pause.append(images.pause_image()))
        record_sysctls()
        deadline = time.monotonic() + timeout
        self._step("network", self._make_network)
        self._step("cgroups", make_cgroups)
        self._step("control-plane", self._start_control_plane)
        self._step("containerd", lambda: self._start_containerd(pause[0], deadline))
        self._step("import", lambda: self.import_images([pause[0], *self.extra_images]))
        self._step("coredns", lambda: self._start_coredns(paths["coredns"], deadline))
        self._step("kubelet", lambda: self._start_kubelet(paths["kubelet"], deadline))
        self._step("kube-proxy", lambda: self._start_kube_proxy(paths["kube-proxy"], deadline))

    def _make_network(self) -> None:
        if ip("link", "show", BRIDGE).returncode != 0:
            ip("link", "add", BRIDGE, "type", "bridge", check=True)
        ip("link", "set", BRIDGE, "address", bridge_mac(), check=True)  # pinned: ports come and go
        ip("addr", "replace", f"{GATEWAY}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE, check=True)
        ip("link", "set", BRIDGE, "up", check=True)
        cni_dir = STATE / "cni" / "net.d"
        cni_dir.mkdir(parents=True, exist_ok=True)
        (cni_dir / "10-mpiop-e2e.conflist").write_text(json.dumps(nodeparts.cni_config(), indent=2))

    def _start_control_plane(self) -> None:
        assert self.workdir is not None
        self.control_plane = ControlPlane(
            workdir=self.workdir / "control-plane", scheduler=True, kubelet_client=True,
            serving_hosts=(GATEWAY,),
            # Pods reach the apiserver at the gateway (the `kubernetes` Service's endpoint).
            extra_apiserver_flags=("--bind-address=0.0.0.0", f"--advertise-address={GATEWAY}",
                                   "--kubelet-preferred-address-types=InternalIP"),
        )
        self.control_plane.start()

    def _launch(self, name: str, argv: list[str]) -> Component:
        assert self.workdir is not None
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        component.start(tie_to_parent=True)
        self.components.append(component)
        return component

    def _wait(self, what: str, ready: Callable[[], bool], deadline: float, component: Component) -> None:
        while time.monotonic() < deadline:
            if not component.running():
                raise NodeError(f"{component.name} exited while waiting for {what}:\n{component.log_tail(40)}")
            if ready():
                return
            time.sleep(0.25)
        raise NodeError(f"{what} not ready in time; {component.name} log:\n{component.log_tail(40)}")

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        result = subprocess.run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
                                capture_output=True, text=True, check=False, timeout=timeout)
        if check and result.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def cri(self, *args: str, timeout: float = 180) -> str:
        result = subprocess.run([str(cri_binary()), "-endpoint", f"unix://{self.containerd_socket}",
                                 "-timeout", f"{int(timeout)}s", *args],
                                capture_output=True, text=True, check=False, timeout=timeout + 10)
        if result.returncode != 0:
            raise NodeError(f"cri {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def _start_containerd(self, pause: oci.Image, deadline: float) -> None:
        assert self.workdir is not None
        config = self.workdir / "containerd.toml"
        config.write_text(nodeparts.containerd_config(self.containerd_root, pause.ref))
        component = self._launch("containerd", ["containerd", "--config", str(config), "--log-level", "info"])

        def serving() -> bool:
            if not self.containerd_socket.exists():
                return False
            return subprocess.run(["ctr", "--address", str(self.containerd_socket), "version"],
                                  capture_output=True, check=False).returncode == 0

        self._wait("containerd", serving, deadline, component)
        # Sandboxes a crashed run left in the kept image store: removed through CRI (network included).
        leftovers = self.cri("ls")
        if leftovers.strip():
            _log(f"removing leftover sandboxes:\n{leftovers}")
            self.cri("rm-all")

    def import_images(self, wanted: Sequence[oci.Image]) -> None:
        """Import what of `wanted` (and their bases) containerd does not hold at the same digest. Under a lock in the
        workdir: processes sharing the node (e2e's xdist workers) import one at a time, each deciding by what
        containerd holds by then."""
        assert self.workdir is not None
        with (self.workdir / "import.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._import_images(wanted)

    def _import_images(self, wanted: Sequence[oci.Image]) -> None:
        present = {}
        for line in self.ctr("images", "ls").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3:
                present[fields[0]] = fields[2]
        ordered: list[oci.Image] = []
        for image in wanted:  # an archive that leaves its base's layers out is taken once containerd has them
            for needed in (image.base, image):
                if needed is not None and needed not in ordered:
                    ordered.append(needed)
        for image in ordered:
            # Older builds of the same image (another tag of that name) only take space in the kept store.
            repository = image.ref.rsplit(":", 1)[0]
            stale = [ref for ref in present if ref.rsplit(":", 1)[0] == repository and ref != image.ref]
            if stale:
                self.ctr("images", "rm", *stale, check=False)
            digest = image.manifest_digest
            if present.get(image.ref) == digest:
                continue
            begin = time.monotonic()
            self.ctr("images", "import", str(image.archive))
            if image.ref not in self.ctr("images", "ls", "-q"):
                raise NodeError(f"importing {image.archive} did not create {image.ref}")
            _log(f"imported {image.ref} in {time.monotonic() - begin:.1f}s")

    def _start_coredns(self, coredns: Path, deadline: float) -> None:
        assert self.workdir is not None
        ready_port = free_port()
        corefile = self.workdir / "Corefile"
        corefile.write_text(nodeparts.corefile(self.kubeconfig, ready_port))
        component = self._launch("coredns", [str(coredns), "-conf", str(corefile)])
        self._wait("CoreDNS", lambda: _http_ok(f"http://127.0.0.1:{ready_port}/ready"), deadline, component)

    def _start_kubelet(self, kubelet: Path, deadline: float) -> None:
        assert self.workdir is not None and self.control_plane is not None
        resolv = self.workdir / "resolv.conf"  # what dnsPolicy: Default pods get (nothing outside)
        resolv.write_text(f"nameserver {GATEWAY}\n")
        logs = KUBELET_ROOT.parent / "pod-logs"
        logs.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(nodeparts.kubelet_config(
            self.control_plane.pki / "ca.crt", free_port(), free_port(), resolv, logs)))
        component = self._launch("kubelet", [
            str(kubelet), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
            f"--root-dir={KUBELET_ROOT}", f"--hostname-override={NODE_NAME}", f"--node-ip={GATEWAY}", "--v=2",
        ])
        self._wait("node Ready", self._node_ready, deadline, component)

    def _start_kube_proxy(self, kube_proxy: Path, deadline: float) -> None:
        assert self.workdir is not None
        healthz = free_port()
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(nodeparts.kube_proxy_config(self.kubeconfig, healthz, free_port())))
        component = self._launch("kube-proxy", [str(kube_proxy), f"--config={config}", "--v=1"])
        # /healthz answers 200 once the rules of the current Services and EndpointSlices are in place.
        self._wait("kube-proxy", lambda: _http_ok(f"http://127.0.0.1:{healthz}/healthz"), deadline, component)

    def _node_ready(self) -> bool:
        assert self.control_plane is not None
        node = self.control_plane.get(f"/api/v1/nodes/{NODE_NAME}")
        if not isinstance(node, dict):
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    # -- teardown ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop everything and undo every change to the host; safe to call more than once. An attached node's
        owner stops it: here nothing."""
        if self.attached:
            return
        errors: list[str] = []
        by_name = {c.name: c for c in self.components}
        for name in ("kube-proxy", "kubelet", "coredns"):
            if name in by_name:
                by_name[name].stop()
        containerd = by_name.get("containerd")
        if containerd is not None and containerd.running():
            try:
                self.cri("rm-all", timeout=120)
            except (NodeError, subprocess.TimeoutExpired) as exc:
                errors.append(f"removing pods through CRI: {exc}")
            containerd.stop()
        if self.control_plane is not None:
            self.control_plane.stop()
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        reset_host(self.containerd_root)  # also restores the sysctls
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if errors:
            _log("; ".join(errors))

    # -- helpers for tests --------------------------------------------------------------------------------
    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        if self.control_plane is None:
            raise ControlPlaneError("the node is not running")
        return self.control_plane.kubectl(*args, input_text=input_text, check=check)


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def prepare() -> dict[str, Path]:
    """Build (or find) every binary and image a node needs, without starting anything.

    The images first: mostly downloads, and .ci/run runs this beside `make test-binaries`, whose Kubernetes build
    then already holds the lock of the module the kubelet is built in: the kubelet compiles out of its cache."""
    if not images.all_images_built():
        diskspace.require_free(cache_dir() / "e2e", diskspace.FIRST_RUN_BYTES, "building the e2e node's images")
    built_images = {image.ref: image.archive for image in images.all_images()}
    paths = binaries.ensure_all(["kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                 "kubectl", "etcd"])
    paths["coredns"] = coredns_binary()
    paths["cri"] = cri_binary()
    paths["kube-proxy"] = kube_proxy_binary()
    paths["draplugin protos"] = draplugin.generated()  # the e2e DRA test's kubelet plugin
    return paths | built_images


def main(argv: list[str] | None = None) -> int:
    """`python -m devcluster.node [up [--mpi]|prepare|reset]`.

    up: bring a node up until Ctrl-C or SIGTERM; prepare: build what a node needs; reset: remove what a
    crashed node left on the host.
    """
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["reset"]:
        reset_host(cache_dir() / "e2e" / "containerd")
        return 0
    if args[:1] == ["prepare"]:
        for name, path in prepare().items():
            print(f"{name:<40} {path}")
        return 0
    node = Node(extra_images=[images.mpi_image()] if "--mpi" in args else [])
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with node:
        print(f"export KUBECONFIG={node.kubeconfig}", flush=True)
        while not stop:
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
