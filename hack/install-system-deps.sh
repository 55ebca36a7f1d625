#!/usr/bin/env bash
# Debian packages the project needs: etcd for the test control plane (unless KUBEBUILDER_ASSETS or
# PATH already has one). Without root or apt, nothing is installed and etcd is built from its Go
# module instead (devcluster/binaries.py).
set -euo pipefail

need=()
if [[ -z "${KUBEBUILDER_ASSETS:-}" || ! -x "${KUBEBUILDER_ASSETS:-}/etcd" ]] && ! command -v etcd >/dev/null; then
  need+=(etcd-server)
fi
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "install-system-deps: not root or no apt-get; skipping ${need[*]} (etcd will be built with Go)" >&2
  exit 0
fi
echo "install-system-deps: apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's package enables an etcd service; the project starts its own etcd per test session.
if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl disable --now etcd >/dev/null 2>&1 || true
fi
