#!/usr/bin/env bash
# Build a Go command from its module at an exact version into the git-ignored .cache/<name>/<version>/, once,
# and print its path. No downloaded binary: the same pinned source for everyone, like the Kubernetes binaries
# (devcluster/binaries.py). Used by hack/helm.sh and hack/promtool.sh.
#   hack/go-install.sh NAME VERSION PACKAGE [go install flags...]
set -euo pipefail

name="$1" version="$2" package="$3"
shift 3
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MPIOP_CACHE_DIR:-$root/.cache}"
dir="$cache/$name/$version"
bin="$dir/$name"

if [[ ! -x "$bin" ]]; then
  # The test session in CI (tests/conftest.py) builds nothing under a test's timeout: `make test-binaries` does.
  if [[ ${MPIOP_NO_BUILD:-0} != 0 ]]; then
    echo "hack/go-install.sh: $name $version: not in $dir, and MPIOP_NO_BUILD=$MPIOP_NO_BUILD forbids building or" \
      "downloading here (it would run under a test's timeout); run \`make test-binaries\` first" >&2
    exit 1
  fi
  mkdir -p "$dir"
  # Concurrent callers (parallel test sessions) build once.
  exec 9>"$dir/.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    command -v go >/dev/null || { echo "hack/go-install.sh: Go is needed to build $name" >&2; exit 1; }
    echo "hack/go-install.sh: building $name $version from its Go module (once; a few minutes)..." >&2
    tmp="$(mktemp -d "$dir/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    GOBIN="$tmp" CGO_ENABLED=0 GOWORK=off GOFLAGS="${GOFLAGS:-} -buildvcs=false" go install -trimpath "$@" \
      "$package@$version" >&2
    mv "$tmp/$name" "$bin"
  fi
fi
echo "$bin"
