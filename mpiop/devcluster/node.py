"""A real single-node Kubernetes on this machine, for end-to-end tests that run real MPI programs.

Parts: the ControlPlane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), containerd + runc
(Debian's packages, with their own config, root, state and socket), the CNI plugins (bridge, host-local,
portmap, loopback) on a bridge of our own, CoreDNS on the host serving ``cluster.local`` from the apiserver
on the bridge's gateway IP (the kubelet's ``clusterDNS``), a kubelet and a kube-proxy (iptables mode)
of the pinned version. MPI itself needs only the headless Service's DNS names, which resolve to pod IPs;
kube-proxy is there for the ``kubernetes`` Service (10.96.0.1), which an operator running in-cluster
reaches the apiserver through.

Host state the node touches, all of it undone by :meth:`Node.stop` and, after a crash, by the next
:meth:`Node.start` (see :func:`reset_host`): processes (children that die with us, plus containerd's
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

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from mpiop.devcluster import binaries, images
from mpiop.devcluster.binaries import BinaryError, _build_lock, _go, cache_dir, project_root
from mpiop.devcluster.controlplane import Component, ControlPlane, ControlPlaneError, free_port
from mpiop.devcluster.versions import KUBERNETES_VERSION

NODE_NAME = "mpiop-e2e"
BRIDGE = "mpiop0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the bridge's address: CoreDNS, the kubelet and the apiserver as pods see them
CLUSTER_DOMAIN = "cluster.local"
STATE = Path("/run/mpiop-e2e")  # sockets, containerd state (container mounts, netns), CNI IPAM
KUBELET_ROOT = Path("/var/lib/mpiop-e2e/kubelet")
CGROUP_PARENT = "mpiop-e2e"
CGROUP_FS = Path("/sys/fs/cgroup")
LEGACY_LOG_LINKS = Path("/var/log/containers")
COREDNS_VERSION = "v1.12.1"
CNI_BIN = Path("/usr/lib/cni")
# Host sysctls the kubelet (setupKernelTunables) or the bridge plugin (ip forwarding) may change.
_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
            "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables")
_MNT_DETACH = 2
# The host's sysctl values from before the first node that changed them; kept until restored, so that a
# crashed run's successor still knows them.
SYSCTL_RECORD = Path("/run/mpiop-e2e.sysctls.json")


class NodeError(RuntimeError):
    """The node could not be brought up (or torn down)."""


def _log(message: str) -> None:
    print(f"[mpiop node] {message}", file=sys.stderr, flush=True)


# -- binaries that are not Kubernetes ----------------------------------------------------------------
def coredns_binary(version: str = COREDNS_VERSION) -> Path:
    """CoreDNS built from its Go module into the cache (its go.mod has no replace: `go install` works)."""
    if found := shutil.which("coredns"):
        return Path(found)
    bin_dir = cache_dir() / "coredns" / version / "bin"
    with _build_lock(bin_dir.parent):
        if (bin_dir / "coredns").is_file():
            return bin_dir / "coredns"
        _log(f"building CoreDNS {version} from github.com/coredns/coredns (first time only)")
        bin_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOBIN": str(bin_dir), "GOWORK": "off", "CGO_ENABLED": "0"}
        result = subprocess.run([_go(), "install", "-trimpath", "-ldflags=-s -w",
                                 f"github.com/coredns/coredns@{version}"], env=env, check=False)
        if result.returncode != 0:
            raise BinaryError(f"building CoreDNS {version} failed (exit {result.returncode})")
        return bin_dir / "coredns"


def cri_binary() -> Path:
    """The harness's minimal crictl (e2e/tools/cri), built once per source change."""
    root = project_root()
    if root is None:
        raise BinaryError("the cri tool is built from a source checkout (e2e/tools/cri)")
    source = root / "e2e" / "tools" / "cri"
    stamp = images._key(*(p.read_bytes() for p in sorted(source.iterdir()) if p.is_file()))
    bin_dir = cache_dir() / "cri" / stamp
    with _build_lock(bin_dir.parent):
        if (bin_dir / "cri").is_file():
            return bin_dir / "cri"
        _log("building the cri tool (e2e/tools/cri)")
        bin_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        result = subprocess.run([_go(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(bin_dir / "cri"), "."],
                                cwd=source, env=env, check=False)
        if result.returncode != 0:
            raise BinaryError(f"building e2e/tools/cri failed (exit {result.returncode})")
        return bin_dir / "cri"


def kube_proxy_binary() -> Path:
    """kube-proxy of the pinned version, built like the other Kubernetes commands (same module, same lock).

    binaries.py builds the control plane and the kubelet; kube-proxy is only needed here, so it is built
    here, in the same wrapper module directory and under the same lock as `binaries.build_kubernetes`.
    """
    name = "kube-proxy"
    if found := binaries._from_assets_or_path(name, KUBERNETES_VERSION):
        return found
    bin_dir = binaries.kube_bin_dir()
    if (bin_dir / name).is_file():
        return bin_dir / name
    binaries.ensure_all(["kubectl"])  # makes the wrapper module (go.mod, go.sum) if nobody has yet
    with _build_lock(bin_dir.parent):
        if (bin_dir / name).is_file():
            return bin_dir / name
        _log(f"building kube-proxy {KUBERNETES_VERSION} (first time only)")
        partial = bin_dir.parent / "bin.partial"
        partial.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
        result = subprocess.run(
            [_go(), "build", "-trimpath", "-ldflags", binaries._version_ldflags(KUBERNETES_VERSION),
             "-o", f"{partial}/", "k8s.io/kubernetes/cmd/kube-proxy"],
            cwd=bin_dir.parent / "gomod", env=env, check=False,
        )
        if result.returncode != 0:
            raise BinaryError(f"building kube-proxy failed (exit {result.returncode})")
        (partial / name).replace(bin_dir / name)
        return bin_dir / name


# -- host clean-up (idempotent; also what a crash leaves behind) --------------------------------------
def _mount_points() -> list[str]:
    """Mount points in /proc/self/mountinfo order (parents before children)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))  # \040 and friends
    return points


def unmount_under(*roots: Path) -> int:
    """Lazily unmount everything at or below `roots`, children first; return how many."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    prefixes = [str(r).rstrip("/") for r in roots]
    count = 0
    for _ in range(5):  # a mount may hide another at the same point
        doomed = [p for p in _mount_points() if any(p == r or p.startswith(r + "/") for r in prefixes)]
        if not doomed:
            break
        for point in reversed(doomed):
            if libc.umount2(point.encode(), _MNT_DETACH) == 0:
                count += 1
    return count


def _processes() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), [a.decode(errors="replace") for a in argv if a]


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _cgroup_dirs() -> list[Path]:
    """Our cgroup subtree in every hierarchy, the hybrid layout's unified one included (runc makes one there)."""
    if not CGROUP_FS.is_dir():
        return []
    return [h / CGROUP_PARENT for h in CGROUP_FS.iterdir() if (h / CGROUP_PARENT).is_dir()]


def _cgroup_pids() -> list[int]:
    pids: set[int] = set()
    for top in _cgroup_dirs():
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def _remove_cgroups() -> None:
    for top in _cgroup_dirs():
        for directory, _subdirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                Path(directory).rmdir()


def _shim_pids() -> list[int]:
    socket = str(STATE / "containerd.sock")
    return [pid for pid, argv in _processes()
            if argv and "containerd-shim" in Path(argv[0]).name and socket in argv]


def _ip(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _delete_network() -> None:
    if _ip("link", "show", BRIDGE).returncode == 0:
        # Ports first: a veth whose peer's namespace is gone disappears by itself, but not one still held.
        for line in _ip("-o", "link", "show", "master", BRIDGE).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            _ip("link", "del", name)
        _ip("link", "del", BRIDGE)
    # portmap's chains, if any pod used a hostPort (named CNI-HOSTPORT-*/CNI-DN-*), in the nat table.
    if shutil.which("iptables"):
        rules = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True,
                               check=False).stdout.splitlines()
        for rule in rules:
            if rule.startswith("-A ") and ("CNI-HOSTPORT" in rule or "CNI-DN-" in rule):
                subprocess.run(["iptables", "-t", "nat", *("-D" + rule[2:]).split()], capture_output=True,
                               check=False)
        for rule in rules:
            if rule.startswith("-N CNI-HOSTPORT") or rule.startswith("-N CNI-DN-"):
                chain = rule.split()[1]
                subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True, check=False)
                subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True, check=False)


def _kube_proxy_cleanup() -> None:
    """kube-proxy's own clean-up of its iptables (and nftables/ipvs) rules, if it ever ran here."""
    kube_proxy = binaries.kube_bin_dir() / "kube-proxy"
    if not kube_proxy.is_file() or shutil.which("iptables") is None:
        return
    chains = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=False).stdout
    if "KUBE-" in chains:
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)


def _remove_log_links() -> None:
    if not LEGACY_LOG_LINKS.is_dir():
        return
    for link in LEGACY_LOG_LINKS.iterdir():
        if link.is_symlink() and str(KUBELET_ROOT.parent) in str(link.readlink()):
            link.unlink()


def reset_host(containerd_root: Path | None = None) -> None:
    """Remove everything a node leaves on the host when its processes are gone (or were killed).

    Safe to call any time no node of ours is running: at the start of every node (a crashed run's
    leftovers) and at the end of :meth:`Node.stop` (whatever the orderly teardown missed).
    """
    for _ in range(50):
        doomed = _shim_pids() + _cgroup_pids()
        if not doomed:
            break
        _kill(doomed)
        time.sleep(0.1)
    unmount_under(STATE, KUBELET_ROOT, *([containerd_root] if containerd_root else []))
    _remove_cgroups()
    _delete_network()
    _kube_proxy_cleanup()
    _remove_log_links()
    restore_sysctls()
    shutil.rmtree(KUBELET_ROOT.parent, ignore_errors=True)
    shutil.rmtree(STATE, ignore_errors=True)


# -- the node -----------------------------------------------------------------------------------------
def _containerd_config(root: Path, pause: str) -> str:
    return f"""\
version = 2
root = "{root}"
state = "{STATE / 'containerd'}"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{STATE / 'containerd.sock'}"
[ttrpc]
  address = "{STATE / 'containerd.sock.ttrpc'}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{STATE / 'opt'}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # root here lacks CAP_SYS_RESOURCE: without this runc fails every sandbox
  # ("can't get final child's PID from pipe") when asked to lower oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which('runc') or '/usr/sbin/runc'}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{STATE / 'cni' / 'net.d'}"
    max_conf_num = 1
"""


def _cni_config() -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "mpiop-e2e",
        "plugins": [
            {
                "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(STATE / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _corefile(kubeconfig: Path, ready_port: int) -> str:
    # No forwarder: pods have no way out of this machine, and nothing outside the cluster is asked for.
    return f"""\
.:53 {{
    bind {GATEWAY}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} mpiop-dev
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
"""


def _kubelet_config(ca: Path, port: int, healthz_port: int, resolv: Path, logs: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": GATEWAY,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{STATE / 'containerd.sock'}",
        "imageServiceEndpoint": f"unix://{STATE / 'containerd.sock'}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_PARENT}",
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv),
        "podLogsDir": str(logs),
        "makeIPTablesUtilChains": False,
        "protectKernelDefaults": False,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        # The images are imported, never pulled: keep them whatever the disk says.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "nodeStatusReportFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "maxPods": 110,
    }


def _kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{GATEWAY}/32"],
        # Leave the host's conntrack tables and OOM score alone (no CAP_SYS_RESOURCE here anyway).
        "conntrack": {"maxPerCore": 0, "min": 0},
        "oomScoreAdj": 0,
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
    }


@dataclass
class Node:
    """One node (control plane included) on this machine. Use as a context manager, or start()/stop().

    `workdir` keeps configs and logs (``.cache/e2e/run`` by default, emptied at start, kept after stop
    for post-mortems). `extra_images` are imported into containerd's ``k8s.io`` namespace besides the
    pause image. `keep_images`: keep containerd's image store between runs in ``.cache/e2e/containerd``
    so a second run imports nothing.
    """

    workdir: Path | None = None
    extra_images: Sequence[images.Image] = ()
    keep_images: bool = True
    control_plane: ControlPlane | None = None
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    _lock: IO[str] | None = None

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
        begin = time.monotonic()
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
        lock_path = Path("/run/mpiop-e2e.lock")
        self._lock = lock_path.open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise NodeError("another mpiop e2e node runs on this machine (/run/mpiop-e2e.lock is held)") from None

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
        pause: list[images.Image] = []
        self._step("images", lambda: pause.append(images.pause_image()))
        _record_sysctls()
        deadline = time.monotonic() + timeout
        self._step("network", self._make_network)
        self._step("cgroups", _make_cgroups)
        self._step("control-plane", self._start_control_plane)
        self._step("containerd", lambda: self._start_containerd(pause[0], deadline))
        self._step("import", lambda: self.import_images([pause[0], *self.extra_images]))
        self._step("coredns", lambda: self._start_coredns(paths["coredns"], deadline))
        self._step("kubelet", lambda: self._start_kubelet(paths["kubelet"], deadline))
        self._step("kube-proxy", lambda: self._start_kube_proxy(paths["kube-proxy"], deadline))

    def _make_network(self) -> None:
        if _ip("link", "show", BRIDGE).returncode != 0:
            _ip("link", "add", BRIDGE, "type", "bridge", check=True)
        _ip("addr", "replace", f"{GATEWAY}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE, check=True)
        _ip("link", "set", BRIDGE, "up", check=True)
        cni_dir = STATE / "cni" / "net.d"
        cni_dir.mkdir(parents=True, exist_ok=True)
        (cni_dir / "10-mpiop-e2e.conflist").write_text(json.dumps(_cni_config(), indent=2))

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

    def _start_containerd(self, pause: images.Image, deadline: float) -> None:
        assert self.workdir is not None
        config = self.workdir / "containerd.toml"
        config.write_text(_containerd_config(self.containerd_root, pause.ref))
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

    def import_images(self, wanted: Sequence[images.Image]) -> None:
        present = {}
        for line in self.ctr("images", "ls").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3:
                present[fields[0]] = fields[2]
        for image in wanted:
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
        corefile.write_text(_corefile(self.kubeconfig, ready_port))
        component = self._launch("coredns", [str(coredns), "-conf", str(corefile)])
        self._wait("CoreDNS", lambda: _http_ok(f"http://127.0.0.1:{ready_port}/ready"), deadline, component)

    def _start_kubelet(self, kubelet: Path, deadline: float) -> None:
        assert self.workdir is not None and self.control_plane is not None
        resolv = self.workdir / "resolv.conf"  # what dnsPolicy: Default pods get (nothing outside)
        resolv.write_text(f"nameserver {GATEWAY}\n")
        logs = KUBELET_ROOT.parent / "pod-logs"
        logs.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(_kubelet_config(
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
        config.write_text(yaml.safe_dump(_kube_proxy_config(self.kubeconfig, healthz, free_port())))
        component = self._launch("kube-proxy", [str(kube_proxy), f"--config={config}", "--v=1"])
        # /healthz answers 200 once the rules of the current Services and EndpointSlices are in place.
        self._wait("kube-proxy", lambda: _http_ok(f"http://127.0.0.1:{healthz}/healthz"), deadline, component)

    def _node_ready(self) -> bool:
        assert self.control_plane is not None
        node = self.control_plane._get(f"/api/v1/nodes/{NODE_NAME}")
        if not isinstance(node, dict):
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    # -- teardown ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop everything and undo every change to the host; safe to call more than once."""
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


def _record_sysctls() -> None:
    if not SYSCTL_RECORD.exists():
        SYSCTL_RECORD.write_text(json.dumps({k: _read_sysctl(k) for k in _SYSCTLS}))


def restore_sysctls() -> None:
    """Put back the values recorded before a node changed them (also those a crashed run left)."""
    try:
        recorded = json.loads(SYSCTL_RECORD.read_text())
    except (OSError, ValueError):
        return
    for key, value in recorded.items():
        if value and _read_sysctl(key) != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(value)
    SYSCTL_RECORD.unlink(missing_ok=True)


def _read_sysctl(key: str) -> str:
    try:
        return (Path("/proc/sys") / key).read_text().strip()
    except OSError:
        return ""


def _make_cgroups() -> None:
    """/mpiop-e2e in every v1 hierarchy: the kubelet's cgroupRoot must exist (and cpuset must be filled)."""
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").is_file():
            continue
        ours = hierarchy / CGROUP_PARENT
        ours.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).is_file() and not (ours / name).read_text().strip():
                (ours / name).write_text((hierarchy / name).read_text())


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def prepare() -> dict[str, Path]:
    """Build (or find) every binary and image a node needs, without starting anything."""
    paths = binaries.ensure_all(["kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                 "kubectl", "etcd"])
    paths["coredns"] = coredns_binary()
    paths["cri"] = cri_binary()
    paths["kube-proxy"] = kube_proxy_binary()
    for image in (images.pause_image(), images.mpi_image()):
        paths[image.ref] = image.archive
    return paths


def main(argv: list[str] | None = None) -> int:
    """`python -m mpiop.devcluster.node [up [--mpi]|prepare|reset]`.

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
