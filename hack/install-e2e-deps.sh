#!/usr/bin/env bash
# Debian packages the e2e node needs (etcd is not one: it is built into .cache/): the container runtime
# (containerd + runc), the CNI plugins (bridge, host-local, portmap, loopback), the tools that build
# images without a Docker engine (debootstrap, gcc for the pause binary) and iptables/iproute2 for the
# pod network. Installs only what is missing; needs root and apt-get (the e2e node needs root anyway).
set -euo pipefail

declare -A want=(
  [containerd]=/usr/bin/containerd
  [runc]=/usr/sbin/runc
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [debootstrap]=/usr/sbin/debootstrap
  [gcc]=/usr/bin/gcc
  [libc6-dev]=/usr/include/stdio.h
  [iptables]=/usr/sbin/iptables
  [iproute2]=/usr/sbin/ip
  [conntrack]=/usr/sbin/conntrack
  [socat]=/usr/bin/socat
  [ethtool]=/usr/sbin/ethtool
  [mount]=/usr/bin/mount
  [util-linux]=/usr/bin/nsenter
  [zstd]=/usr/bin/zstd
)
need=()
for pkg in "${!want[@]}"; do
  [[ -e ${want[$pkg]} ]] || need+=("$pkg")
done
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "install-e2e-deps: the e2e node needs root and apt-get to install: ${need[*]}" >&2
  exit 1
fi
echo "install-e2e-deps: apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps Debian's containerd service from starting: the harness runs its own containerd
# with its own config, root and socket.
policy=/usr/sbin/policy-rc.d
created_policy=
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
fi
trap '[[ -n $created_policy ]] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
  systemctl disable --now containerd >/dev/null 2>&1 || true
fi
