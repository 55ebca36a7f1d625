"""mpiop: an asyncio Kubernetes operator for MPIJobs (kubeflow.org/v2beta1)."""

__version__ = "0.1.0"

# The Kubernetes version mpiop is developed and tested against; devcluster pins its binaries to it. The newest
# patch of the newest minor the Go module proxy serves (README, "Kubernetes versions": what runs on which minor).
# This project's machines use cgroup v1: its kubelet runs there with ``failCgroupV1: false`` (devcluster/nodeparts.py),
# a warning until the cgroup v1 code goes (no earlier than 1.38, KEP-5573).
KUBERNETES_VERSION = "v1.37.2"
