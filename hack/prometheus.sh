#!/usr/bin/env bash
# Print the path of the Prometheus server (or, with `promtool`, of its promtool) taken out of Debian's
# `prometheus` package into the git-ignored .cache/prometheus/<Debian version>/, once. The server scrapes a
# running mpiop and evaluates the shipped alert rules (tests/integration/test_prometheus.py); promtool checks
# and unit-tests the same rules (test_monitoring.py, through hack/promtool.sh), so both are one Prometheus
# version. Only the two binaries are extracted (`apt-get download`, no install): no service is started, no user
# made, nothing written outside .cache/.
#   hack/prometheus.sh             -> prints .cache/prometheus/<version>/prometheus
#   hack/prometheus.sh promtool    -> prints .cache/prometheus/<version>/promtool
# Why Debian's package and not the github.com/prometheus/prometheus Go module: the package is a 19 MB download,
# where building promtool from the module took 15 minutes of a busy 2-core machine on a brand-new one, and the
# server more. Debian 12 ships Prometheus 2.42.
set -euo pipefail

tool="${1:-prometheus}"
[[ $tool == prometheus || $tool == promtool ]] || { echo "usage: hack/prometheus.sh [prometheus|promtool]" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MPIOP_CACHE_DIR:-$root/.cache}"

candidate() { apt-cache policy prometheus 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'; }

version="$(command -v apt-cache >/dev/null && candidate || true)"
if [[ -z $version ]]; then
  # apt cannot say which version it would fetch (no package lists, or no apt): one already fetched will do.
  cached="$(ls "$cache"/prometheus/*/"$tool" 2>/dev/null | sort -V | tail -n 1)"
  [[ -n $cached ]] && { echo "$cached"; exit 0; }
fi
# The test session in CI (tests/conftest.py) fetches nothing under a test's timeout: `make test-binaries` does.
refuse_fetch() {
  if [[ ${MPIOP_NO_BUILD:-0} != 0 ]]; then
    echo "hack/prometheus.sh: $tool (Debian's prometheus ${version:-package}): not in $cache/prometheus, and" \
      "MPIOP_NO_BUILD=$MPIOP_NO_BUILD forbids building or downloading here (it would run under a test's timeout);" \
      "run \`make test-binaries\` first" >&2
    exit 1
  fi
}
[[ -n $version ]] || refuse_fetch
command -v apt-get >/dev/null || { echo "hack/prometheus.sh: apt-get is needed to fetch Debian's prometheus" >&2; exit 1; }
if [[ -z $version && $(id -u) -eq 0 ]]; then
  apt-get update -qq >&2  # a new machine's package lists may not have been fetched yet
  version="$(candidate)"
fi
[[ -n $version ]] || {
  echo "hack/prometheus.sh: apt knows no 'prometheus' package; run 'apt-get update' as root first" >&2
  exit 1
}

dir="$cache/prometheus/$version"
bin="$dir/$tool"
if [[ ! -x "$dir/prometheus" || ! -x "$dir/promtool" ]]; then
  mkdir -p "$dir"
  # Concurrent callers (parallel test sessions) fetch once.
  exec 9>"$dir/.lock"
  flock 9
  if [[ ! -x "$dir/prometheus" || ! -x "$dir/promtool" ]]; then
    refuse_fetch
    echo "hack/prometheus.sh: fetching Debian's prometheus $version (once)..." >&2
    tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # The sandbox user is the caller: apt's _apt user cannot write into a caller's temporary directory.
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" "prometheus=$version" >&2)
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/prometheus ./usr/bin/promtool
    mv "$tmp/usr/bin/promtool" "$dir/promtool"
    mv "$tmp/usr/bin/prometheus" "$dir/prometheus"
  fi
fi
echo "$bin"
