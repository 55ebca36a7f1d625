#!/usr/bin/env bash
# Print the path of a Prometheus server binary taken out of Debian's `prometheus` package into the git-ignored
# .cache/prometheus/<Debian version>/, once. tests/integration/test_prometheus.py runs it: it scrapes a running
# mpiop and evaluates the shipped alert rules. Only the binary is extracted (`apt-get download`, no install):
# no service is started, no user made, nothing written outside .cache/.
#   hack/prometheus.sh             -> prints .cache/prometheus/<version>/prometheus
# Why Debian's and not the Go module promtool is built from (hack/promtool.sh): the package is a 19 MB
# download, where building cmd/prometheus takes minutes of a 2-core machine. Debian 12 ships Prometheus 2.42.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MPIOP_CACHE_DIR:-$root/.cache}"

candidate() { apt-cache policy prometheus 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'; }

version="$(command -v apt-cache >/dev/null && candidate || true)"
if [[ -z $version ]]; then
  # apt cannot say which version it would fetch (no package lists, or no apt): one already fetched will do.
  cached="$(ls "$cache"/prometheus/*/prometheus 2>/dev/null | sort -V | tail -n 1)"
  [[ -n $cached ]] && { echo "$cached"; exit 0; }
fi
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
bin="$dir/prometheus"
if [[ ! -x "$bin" ]]; then
  mkdir -p "$dir"
  # Concurrent callers (parallel test sessions) fetch once.
  exec 9>"$dir/.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    echo "hack/prometheus.sh: fetching Debian's prometheus $version (once)..." >&2
    tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # The sandbox user is the caller: apt's _apt user cannot write into a caller's temporary directory.
    (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" "prometheus=$version" >&2)
    dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/prometheus
    mv "$tmp/usr/bin/prometheus" "$bin"
  fi
fi
echo "$bin"
