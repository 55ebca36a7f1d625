#!/usr/bin/env bash
# Print the path of stress-ng (Debian's package), installing it first if it is missing. `make test-stress`
# keeps both cores busy with it while the whole suite runs, to find tests that race the operator.
#   hack/stress-ng.sh            -> prints /usr/bin/stress-ng
# It is installed with apt-get, not unpacked into .cache/: the binary links a dozen shared libraries
# (libjudy, libipsec-mb, libgbm, ...) that a bare Debian does not have, and apt brings them along.
set -euo pipefail

if found=$(command -v stress-ng); then
  echo "$found"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "stress-ng is not installed, and installing it needs root and apt-get: apt-get install stress-ng" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or old on a fresh machine: update once, only when the install fails.
if ! apt-get install -y -q --no-install-recommends stress-ng >/dev/null; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends stress-ng >/dev/null
fi
command -v stress-ng
