#!/bin/sh
# Runs inside the debootstrapped rootfs (chroot) of the MPI test image: sshd for root and non-root,
# the ssh client config, the mpiuser account (uid 1000), PyTorch and mpi4py, Intel MPI and the pi program
# for the three MPI libraries.
set -eux
# Debian's CPU builds (PyPI's Linux torch wheels pull gigabytes of CUDA libraries). apt, not debootstrap,
# resolves their dependencies.
apt-get update
apt-get install -y --no-install-recommends python3-torch python3-mpi4py
python3 -c 'import torch, mpi4py; print("torch", torch.__version__, "mpi4py", mpi4py.__version__)'
# Intel MPI's runtime (PyPI's impi-rt, extracted by devcluster/intelmpi.py) and its launcher on PATH.
mkdir -p /opt/intel
mv /build/intel-mpi /opt/intel/mpi
install -m 0755 /build/mpiexec.hydra /usr/local/bin/mpiexec.hydra
install -m 0755 /build/mpi-sshd /usr/local/bin/mpi-sshd
install -m 0755 /build/mpi-wait-hosts /usr/local/bin/mpi-wait-hosts
install -m 0644 /build/ssh_client.conf /etc/ssh/ssh_config.d/mpi.conf
# Root's sshd: the secret-mounted ~/.ssh is a world-writable tmpfs dir, so no StrictModes; port 2222.
sed -i 's/^#\?StrictModes .*/StrictModes no/; s/^#\?Port .*/Port 2222/' /etc/ssh/sshd_config
grep -q '^StrictModes no' /etc/ssh/sshd_config || echo 'StrictModes no' >>/etc/ssh/sshd_config
rm -f /etc/ssh/ssh_host_*            # every container generates its own
mkdir -p /run/sshd
id mpiuser >/dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash mpiuser
usermod -p "*" mpiuser               # no password, but not "locked" (sshd without PAM refuses locked accounts)
# In minbase there is no `gcc` symlink package: tell the wrappers which compiler to use.
OMPI_CC=gcc-12 mpicc.openmpi -O2 -o /usr/local/bin/pi-openmpi /build/pi.c
MPICH_CC=gcc-12 mpicc.mpich -O2 -o /usr/local/bin/pi-mpich /build/pi.c
# Intel MPI shares MPICH's ABI (libmpi.so.12): MPICH's header, Intel's library (what Intel's mpicc does).
gcc-12 -O2 -I/usr/include/x86_64-linux-gnu/mpich -o /usr/local/bin/pi-intel /build/pi.c \
  -L/opt/intel/mpi/lib -Wl,-rpath,/opt/intel/mpi/lib -Wl,-rpath-link,/opt/intel/mpi/lib/libfabric -lmpi
install -m 0755 /usr/local/bin/pi-openmpi /home/mpiuser/pi
chown mpiuser:mpiuser /home/mpiuser/pi
# Open MPI's shared-memory transport would use CMA (process_vm_readv), which needs ptrace rights that
# containers do not have; copy through shared memory instead.
echo 'btl_vader_single_copy_mechanism = none' >>/etc/openmpi/openmpi-mca-params.conf
set +x
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
