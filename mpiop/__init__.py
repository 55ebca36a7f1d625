"""mpiop: an asyncio Kubernetes operator for MPIJobs (kubeflow.org/v2beta1)."""

__version__ = "0.1.0"
