"""The one place that pins the Kubernetes version mpiop is developed and tested against.

v1.34 is the newest minor whose kubelet still runs on cgroup v1 without extra flags
(kubelet >= 1.35 refuses v1 unless ``failCgroupV1: false``), and this project's machines use v1.
"""

KUBERNETES_VERSION = "v1.34.4"

# etcd used only when none is found (KUBEBUILDER_ASSETS, PATH): the server the pinned Kubernetes
# release vendors its etcd client from.
ETCD_VERSION = "v3.6.4"

# KWOK (Kubernetes WithOut Kubelet) for the simulated-cluster mode: fake nodes whose pods turn Running by
# Stages instead of containers. v0.8.0 is built with client-go v0.36, which speaks to a v1.34 apiserver.
KWOK_VERSION = "v0.8.0"


def staging_version(kubernetes_version: str = KUBERNETES_VERSION) -> str:
    """k8s.io staging modules are tagged v0.Y.Z for Kubernetes v1.Y.Z."""
    major, minor, patch = kubernetes_version.lstrip("v").split(".")
    if major != "1":
        raise ValueError(f"unexpected Kubernetes version {kubernetes_version!r}")
    return f"v0.{minor}.{patch}"
