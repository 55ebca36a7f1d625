#!/usr/bin/env bash
# Print the path of promtool, taken with the Prometheus server out of Debian's `prometheus` package into the
# git-ignored .cache/ (hack/prometheus.sh), so the rules are checked and unit-tested by the same Prometheus that
# evaluates them against a running mpiop. `make test` checks and unit-tests the alerting rules with it
# (deploy/overlays/prometheus, tests/integration/test_monitoring.py).
#   hack/promtool.sh             -> prints .cache/prometheus/<version>/promtool
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/prometheus.sh" promtool
