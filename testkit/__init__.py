"""The public test toolkit, shared by the tests, e2e and the bench (none of which may import another's
modules; `.importlinter`), on top of devcluster: the MPIJob and Pod builders (`mpijobs`, `pods`), decide()'s
simulated world, the operator in-process (`operator`) and as a child process (`process`) with its /metrics
read (`metrics`), namespaces, deploy/ and its RBAC, kubeflow's recorded objects, and e2e's client and jobs
(`testkit.e2e`).

Like the tests it is neither in the wheel nor in the operator image.
"""
