#!/bin/sh
# Runs inside the debootstrapped rootfs (chroot) of the operator image: what deploy/Dockerfile does on
# python:slim, here on Debian's python3: mpiop and its dependencies (wheels made on the host) in /opt/mpiop,
# bytecode compiled at build time (the pod's root filesystem is read-only).
set -eux
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m venv /opt/mpiop
/opt/mpiop/bin/pip install -q --no-index --find-links /build/wheels mpiop
/opt/mpiop/bin/python -m compileall -q /opt/mpiop/lib
/opt/mpiop/bin/mpiop --help >/dev/null
# The product alone: the dev/test infrastructure (devcluster) is in neither the wheel nor this image.
if /opt/mpiop/bin/python -c 'import devcluster' 2>/dev/null || /opt/mpiop/bin/python -c 'import mpiop.devcluster' 2>/dev/null \
   || /opt/mpiop/bin/mpiop --help | grep -q dev-cluster; then
  echo 'dev-cluster code found in the operator image' >&2
  exit 1
fi
set +x
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
