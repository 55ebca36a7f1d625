"""What an e2e node is made of beyond the control plane: the binaries that are not the control plane's
(CoreDNS, the cri tool, kube-proxy) and the config files of containerd, CNI, CoreDNS, the kubelet and
kube-proxy. Pure functions of paths and ports, so their unit tests need no node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from devcluster import binaries, images, pinned
from devcluster.binaries import BinaryError, build_lock, cache_dir, go_tool, project_root
from devcluster.nodehost import (
    BRIDGE,
    CGROUP_PARENT,
    CLUSTER_DOMAIN,
    CNI_BIN,
    COREDNS_VERSION,
    GATEWAY,
    NODE_NAME,
    POD_SUBNET,
    STATE,
)
from devcluster.nodehost import log as _log
from devcluster.versions import KUBERNETES_VERSION

# -- binaries that are not Kubernetes ----------------------------------------------------------------
PREPARED_BY = "`python -m devcluster.node prepare` (`make e2e` runs it)"


def coredns_binary(version: str = COREDNS_VERSION) -> Path:
    """CoreDNS built from its Go module into the cache, on the project's Kubernetes modules (devcluster/pinned.py)."""
    if found := shutil.which("coredns"):
        return Path(found)
    bin_dir = pinned.build_pinned(cache_dir() / "coredns" / version, {"coredns": "github.com/coredns/coredns"},
                                  require=f"github.com/coredns/coredns {version}", what=f"CoreDNS {version}",
                                  ldflags="-s -w", built_by=PREPARED_BY)
    return bin_dir / "coredns"


def cri_binary() -> Path:
    """The harness's minimal crictl (e2e/tools/cri), built once per source change."""
    root = project_root()
    if root is None:
        raise BinaryError("the cri tool is built from a source checkout (e2e/tools/cri)")
    source = root / "e2e" / "tools" / "cri"
    stamp = images.cache_key(*(p.read_bytes() for p in sorted(source.iterdir()) if p.is_file()))
    bin_dir = cache_dir() / "cri" / stamp
    with build_lock(bin_dir.parent):
        if (bin_dir / "cri").is_file():
            return bin_dir / "cri"
        binaries.refuse_build("cri (e2e/tools/cri)", bin_dir, PREPARED_BY)
        _log("building the cri tool (e2e/tools/cri)")
        bin_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
        result = subprocess.run([go_tool(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(bin_dir / "cri"), "."],
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
    if found := binaries.from_assets_or_path(name, KUBERNETES_VERSION):
        return found
    bin_dir = binaries.kube_bin_dir()
    if (bin_dir / name).is_file():
        return bin_dir / name
    binaries.ensure_all(["kubectl"])  # makes the wrapper module (go.mod, go.sum) if nobody has yet
    with build_lock(bin_dir.parent):
        if (bin_dir / name).is_file():
            return bin_dir / name
        binaries.refuse_build(f"kube-proxy (Kubernetes {KUBERNETES_VERSION})", bin_dir, PREPARED_BY)
        _log(f"building kube-proxy {KUBERNETES_VERSION} (first time only)")
        partial = bin_dir.parent / "bin.partial"
        partial.mkdir(parents=True, exist_ok=True)
        binaries.go_build(bin_dir.parent / "gomod", ["k8s.io/kubernetes/cmd/kube-proxy"], partial,
                          binaries.version_ldflags(KUBERNETES_VERSION))
        (partial / name).replace(bin_dir / name)
        return bin_dir / name


# -- config files -----------------------------------------------------------------------------------------
def containerd_config(root: Path, pause: str) -> str:
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


def cni_config() -> dict[str, Any]:
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


def corefile(kubeconfig: Path, ready_port: int) -> str:
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


def kubelet_config(ca: Path, port: int, healthz_port: int, resolv: Path, logs: Path) -> dict[str, Any]:
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


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
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
