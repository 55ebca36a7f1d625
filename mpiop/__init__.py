"""mpiop: an asyncio Kubernetes operator for MPIJobs (kubeflow.org/v2beta1)."""

__version__ = "0.1.0"

# The Kubernetes version mpiop is developed and tested against; devcluster pins its binaries to it.
# v1.34 is the newest minor whose kubelet still runs on cgroup v1 without extra flags (kubelet >= 1.35
# refuses v1 unless ``failCgroupV1: false``), and this project's machines use v1.
KUBERNETES_VERSION = "v1.37.2"
