"""The versions of every tool the dev cluster builds. Kubernetes itself is pinned in ``mpiop.KUBERNETES_VERSION``
(the version the product is tested against); this module re-exports it for the builders."""

from mpiop import KUBERNETES_VERSION

__all__ = ["CONTROLLER_TOOLS_VERSION", "ETCD_VERSION", "HELM_VERSION", "KUBERNETES_VERSION", "KUEUE_VERSION",
           "KWOK_VERSION", "SCHEDULER_PLUGINS_VERSION", "VOLCANO_APIS_VERSION", "staging_version"]

# etcd for every control plane (dev, tests, bench, the e2e node) unless KUBEBUILDER_ASSETS has one: the 3.6
# line Kubernetes v1.34 ships with and is tested against, at the newest patch the Go module proxy serves.
ETCD_VERSION = "v3.7.0"

# KWOK (Kubernetes WithOut Kubelet) for the simulated-cluster mode: fake nodes whose pods turn Running by
# Stages instead of containers. v0.8.0 is built with client-go v0.36, which speaks to a v1.34 apiserver.
KWOK_VERSION = "v0.8.0"

# Gang scheduling: scheduler-plugins' kube-scheduler with the Coscheduling plugin (and its PodGroup CRD): the
# release for Kubernetes v1.34, built on the pinned KUBERNETES_VERSION itself (devcluster/coscheduler.py), so
# it shares the Kubernetes binaries' compiled packages. Volcano's PodGroup API of that release, whose CRD
# controller-gen generates from the module's Go types (the module ships none).
SCHEDULER_PLUGINS_VERSION = "v0.34.7"
VOLCANO_APIS_VERSION = "v1.12.1"
CONTROLLER_TOOLS_VERSION = "v0.22.0"

# Kueue's controller manager for the tests that run it on MPIJobs (devcluster/kueue.py): the newest release on
# Kubernetes' v0.34 libraries the Go module proxy serves (v0.15.3 to v0.15.5 refused; v0.16 and v0.17 are on
# v0.35, which a build pinned to v1.34 cannot compile), so it compiles only its own packages (devcluster/pinned.py).
# Both serve kueue.x-k8s.io/v1beta2; test_kueue.py and test_kueue_dra.py pass on both (the suite ran v0.17.0 before).
KUEUE_VERSION = "v0.19.2"

# helm, which the tests render the chart with (devcluster/helm.py): the newest release on Kubernetes' v0.34
# libraries (v3.20 and later are on v0.35 and v0.36, which a build pinned to v1.34 cannot compile), so that it is
# built on the project's Kubernetes modules (devcluster/pinned.py).
HELM_VERSION = "v3.22.0"


def staging_version(kubernetes_version: str = KUBERNETES_VERSION) -> str:
    """k8s.io staging modules are tagged v0.Y.Z for Kubernetes v1.Y.Z."""
    major, minor, patch = kubernetes_version.lstrip("v").split(".")
    if major != "1":
        raise ValueError(f"unexpected Kubernetes version {kubernetes_version!r}")
    return f"v0.{minor}.{patch}"
