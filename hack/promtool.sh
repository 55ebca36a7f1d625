#!/usr/bin/env bash
# Print the path of a promtool binary built from its Go module (github.com/prometheus/prometheus/cmd/promtool)
# into the git-ignored .cache/, building it on first use (hack/go-install.sh). `make test` checks and
# unit-tests the alerting rules with it (deploy/monitoring/, tests/integration/test_monitoring.py).
#   hack/promtool.sh             -> prints .cache/promtool/<version>/promtool
# Prometheus v3.Y.Z is tagged v0.3YY.Z for Go modules: v0.316.0 is Prometheus 3.16.0.
set -euo pipefail

PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
# remove_all_sd: no service-discovery plugins (rule checks and tests need none). It also keeps the build off
# modules the Go proxy does not serve: v0.316.0's Nomad SD pins github.com/hashicorp/nomad/api at a
# pseudo-version the proxy answers with 403, so promtool with every plugin cannot be built from the proxy.
exec bash "$(dirname "${BASH_SOURCE[0]}")/go-install.sh" promtool "$PROMTOOL_VERSION" \
  github.com/prometheus/prometheus/cmd/promtool -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMTOOL_VERSION"
