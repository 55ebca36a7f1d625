"""What the end-to-end tests share: a small synchronous apiserver client, the session (node, namespace,
operator, report), and the MPI and training jobs several scenarios run."""
