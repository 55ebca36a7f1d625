#!/usr/bin/env bash
# Print the path of a helm binary built from its Go module (helm.sh/helm/v3/cmd/helm) into the
# git-ignored .cache/, building it on first use. No downloaded binary: the same pinned source for
# everyone, like the Kubernetes binaries (devcluster/binaries.py).
#   hack/helm.sh                 -> prints .cache/helm/<version>/helm
#   $(hack/helm.sh) template deploy/helm/mpiop
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MPIOP_CACHE_DIR:-$root/.cache}"
dir="$cache/helm/$HELM_VERSION"
bin="$dir/helm"

if [[ ! -x "$bin" ]]; then
  mkdir -p "$dir"
  # Concurrent callers (parallel test sessions) build once.
  exec 9>"$dir/.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null || { echo "hack/helm.sh: Go is needed to build helm" >&2; exit 1; }
    echo "hack/helm.sh: building helm $HELM_VERSION from its Go module (once; a few minutes)..." >&2
    tmp="$(mktemp -d "$dir/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false" go install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
    mv "$tmp/helm" "$bin"
  fi
fi
echo "$bin"
