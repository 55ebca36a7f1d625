"""The local development and test infrastructure: a real control plane, a real node, a simulated cluster.

Not part of the product (neither in the wheel nor in the operator image): tests, e2e, bench and `make run`
use it from the checkout. `python -m devcluster up|status|down` runs the control plane for humans.
"""
