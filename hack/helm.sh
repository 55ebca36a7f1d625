#!/usr/bin/env bash
# Print the path of a helm binary built from its Go module (helm.sh/helm/v3/cmd/helm) into the
# git-ignored .cache/, building it on first use (hack/go-install.sh).
#   hack/helm.sh                 -> prints .cache/helm/<version>/helm
#   $(hack/helm.sh) template deploy/helm/mpiop
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/go-install.sh" helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
