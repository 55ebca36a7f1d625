"""The public test toolkit: MPIJob/Pod builders, namespace helpers and kubeflow's recorded objects.

Shared by the tests, e2e, the bench and devcluster, none of which may import another's modules; like the
product's tests it is neither in the wheel nor in the operator image.
"""
