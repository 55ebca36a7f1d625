"""The versions of every tool the dev cluster builds. Kubernetes itself is pinned in ``mpiop.KUBERNETES_VERSION``
(the version the product is tested against); this module re-exports it for the builders."""

from mpiop import KUBERNETES_VERSION

__all__ = ["CONTROLLER_TOOLS_VERSION", "ETCD_VERSION", "HELM_VERSION", "KUBERNETES_VERSION", "KUEUE_KUBERNETES_VERSION",
           "KUEUE_VERSION", "KWOK_VERSION", "OLDEST_KUBERNETES_VERSION", "SCHEDULER_PLUGINS_KUBERNETES_VERSION",
           "SCHEDULER_PLUGINS_VERSION", "VOLCANO_APIS_VERSION", "staging_version"]

# The oldest Kubernetes minor still supported (1.35: end of life 2027-02-28), at the newest patch the Go module
# proxy serves: the tests marked `oldest_minor` run again on a control plane of it (`make test`; README,
# "Kubernetes versions").
OLDEST_KUBERNETES_VERSION = "v1.35.4"

# etcd for every control plane (dev, tests, bench, the e2e node) unless KUBEBUILDER_ASSETS has one: the release
# Kubernetes v1.37 is tested with (its build/dependencies.yaml, hack/lib/etcd.sh and kubeadm's default: 3.7.0).
ETCD_VERSION = "v3.7.0"

# KWOK (Kubernetes WithOut Kubelet) for the simulated-cluster mode: fake nodes whose pods turn Running by
# Stages instead of containers. v0.8.0 (its go.mod on client-go v0.36) is the newest release the Go module proxy
# serves (v0.9.0 refused); built on the v1.37.2 modules (devcluster/pinned.py), a client one minor behind its
# apiserver, within the client skew policy.
KWOK_VERSION = "v0.8.0"

# Gang scheduling: scheduler-plugins' kube-scheduler with the Coscheduling plugin (and its PodGroup CRD). Its
# newest release the Go module proxy serves is v0.34.7, for Kubernetes v1.34 (v0.35.7's zip refused; there is no
# v0.36 or v0.37): pinned to v1.37.2 it does not compile (1.37 moved the scheduler framework's types), so it is
# built on the v1.34.4 modules (devcluster/coscheduler.py): a second compile of what it shares with Kubernetes
# (on the oldest minor's v1.35.4 modules, to share theirs, it does not compile either: `undefined: framework.Handle`,
# `framework.SharedLister`, ... in pkg/coscheduling and pkg/capacityscheduling, tried 2026-12-02),
# and a scheduler three minors older than its apiserver, outside kube-scheduler's one-minor skew policy (its
# tests pass on it: test_gang_simulated.py). Kubernetes' own gang scheduling (the Workload API) needs none.
# Volcano's PodGroup API, whose CRD controller-gen generates from the module's Go types (the module ships none).
SCHEDULER_PLUGINS_VERSION = "v0.34.7"
SCHEDULER_PLUGINS_KUBERNETES_VERSION = "v1.34.4"
VOLCANO_APIS_VERSION = "v1.12.1"
CONTROLLER_TOOLS_VERSION = "v0.22.0"

# Kueue's controller manager for the tests that run it on MPIJobs (devcluster/kueue.py): the newest release the Go
# module proxy serves (v0.20.x refused), on Kubernetes' v0.36 libraries in its go.mod. WaitForPodsReady is on by
# default from v0.19 (an MPIJob is ready when Running=True); v0.19 removed the DynamicResourceAllocation gate
# (KueueDRAIntegration, on from v0.18). The suite ran v0.15.2 (on v1.34) and v0.17.0 before. Pinned to v1.37.2 it
# does not compile (its scheduler-library calls v1.36's scheduler internals): it is built on the newest v1.36 patch
# the proxy serves (its go.mod says v1.36.0 and v0.36.2), a second compile of what it shares with Kubernetes.
KUEUE_VERSION = "v0.19.2"
KUEUE_KUBERNETES_VERSION = "v1.36.3"

# helm, which the tests render the chart with (devcluster/helm.py): v3.22.0, the last Helm 3 minor, on Kubernetes'
# v0.37 libraries (so it is built on the project's Kubernetes modules, devcluster/pinned.py). Helm 3 gets security
# fixes until 2027-02-10; Helm 4 was not tried.
HELM_VERSION = "v3.22.0"


def staging_version(kubernetes_version: str = KUBERNETES_VERSION) -> str:
    """k8s.io staging modules are tagged v0.Y.Z for Kubernetes v1.Y.Z."""
    major, minor, patch = kubernetes_version.lstrip("v").split(".")
    if major != "1":
        raise ValueError(f"unexpected Kubernetes version {kubernetes_version!r}")
    return f"v0.{minor}.{patch}"
