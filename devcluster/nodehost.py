"""The host state an e2e node touches, and how it is undone: processes, mounts, cgroups, the bridge,
iptables chains, log links and sysctls. Idempotent: what :func:`reset_host` removes is also what a crashed
run leaves behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from devcluster import binaries

NODE_NAME = "mpiop-e2e"
BRIDGE = "mpiop0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the bridge's address: CoreDNS, the kubelet and the apiserver as pods see them


def bridge_mac(gateway: str = GATEWAY) -> str:
    """The bridge's fixed MAC, 0a:58 and the gateway's IPv4 bytes, as the CNI bridge plugin derives it.

    A Linux bridge whose MAC was never set takes the lowest MAC of its ports, so a pod starting or going moved it,
    and every other pod's ARP entry for the gateway went stale: their traffic to the host (the status endpoint,
    CoreDNS, the apiserver) was lost for tens of seconds (e2e: a DDP job's progress posts timed out for 7 epochs
    after the test's reference pod started). The plugin pins it only on a bridge it gives the address to."""
    return "0a:58:" + ":".join(f"{int(part):02x}" for part in gateway.split("."))
CLUSTER_DOMAIN = "cluster.local"
STATE = Path("/run/mpiop-e2e")  # sockets, containerd state (container mounts, netns), CNI IPAM
KUBELET_ROOT = Path("/var/lib/mpiop-e2e/kubelet")
CGROUP_PARENT = "mpiop-e2e"
CGROUP_FS = Path("/sys/fs/cgroup")
LEGACY_LOG_LINKS = Path("/var/log/containers")
# The CoreDNS Kubernetes v1.37 ships (kubeadm's CoreDNSVersion, build/dependencies.yaml), built on the project's
# Kubernetes modules (devcluster/pinned.py; its own go.mod is on client-go v0.35.4).
COREDNS_VERSION = "v1.14.6"
CNI_BIN = Path("/usr/lib/cni")
# Host sysctls the kubelet (setupKernelTunables) or the bridge plugin (ip forwarding) may change.
_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
            "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables")
_MNT_DETACH = 2
# The host's sysctl values from before the first node that changed them; kept until restored, so that a
# crashed run's successor still knows them.
SYSCTL_RECORD = Path("/run/mpiop-e2e.sysctls.json")




def log(message: str) -> None:
    print(f"[mpiop node] {message}", file=sys.stderr, flush=True)


# -- clean-up --------------------------------------
def _mount_points() -> list[str]:
    """Mount points in /proc/self/mountinfo order (parents before children)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))  # \040 and friends
    return points


def unmount_under(*roots: Path) -> int:
    """Lazily unmount everything at or below `roots`, children first; return how many."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    prefixes = [str(r).rstrip("/") for r in roots]
    count = 0
    for _ in range(5):  # a mount may hide another at the same point
        doomed = [p for p in _mount_points() if any(p == r or p.startswith(r + "/") for r in prefixes)]
        if not doomed:
            break
        for point in reversed(doomed):
            if libc.umount2(point.encode(), _MNT_DETACH) == 0:
                count += 1
    return count


def _processes() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), [a.decode(errors="replace") for a in argv if a]


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _cgroup_dirs() -> list[Path]:
    """Our cgroup subtree in every hierarchy, the hybrid layout's unified one included (runc makes one there)."""
    if not CGROUP_FS.is_dir():
        return []
    return [h / CGROUP_PARENT for h in CGROUP_FS.iterdir() if (h / CGROUP_PARENT).is_dir()]


def _cgroup_pids() -> list[int]:
    pids: set[int] = set()
    for top in _cgroup_dirs():
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def _remove_cgroups() -> None:
    for top in _cgroup_dirs():
        for directory, _subdirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                Path(directory).rmdir()


def _shim_pids() -> list[int]:
    socket = str(STATE / "containerd.sock")
    return [pid for pid, argv in _processes()
            if argv and "containerd-shim" in Path(argv[0]).name and socket in argv]


def ip(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _delete_network() -> None:
    if ip("link", "show", BRIDGE).returncode == 0:
        # Ports first: a veth whose peer's namespace is gone disappears by itself, but not one still held.
        for line in ip("-o", "link", "show", "master", BRIDGE).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            ip("link", "del", name)
        ip("link", "del", BRIDGE)
    # portmap's chains, if any pod used a hostPort (named CNI-HOSTPORT-*/CNI-DN-*), in the nat table.
    if shutil.which("iptables"):
        rules = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True,
                               check=False).stdout.splitlines()
        for rule in rules:
            if rule.startswith("-A ") and ("CNI-HOSTPORT" in rule or "CNI-DN-" in rule):
                subprocess.run(["iptables", "-t", "nat", *("-D" + rule[2:]).split()], capture_output=True,
                               check=False)
        for rule in rules:
            if rule.startswith("-N CNI-HOSTPORT") or rule.startswith("-N CNI-DN-"):
                chain = rule.split()[1]
                subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True, check=False)
                subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True, check=False)


def _kube_proxy_cleanup() -> None:
    """kube-proxy's own clean-up of its iptables (and nftables/ipvs) rules, if it ever ran here."""
    kube_proxy = binaries.kube_bin_dir() / "kube-proxy"
    if not kube_proxy.is_file() or shutil.which("iptables") is None:
        return
    chains = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=False).stdout
    if "KUBE-" in chains:
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)


def _remove_log_links() -> None:
    if not LEGACY_LOG_LINKS.is_dir():
        return
    for link in LEGACY_LOG_LINKS.iterdir():
        if link.is_symlink() and str(KUBELET_ROOT.parent) in str(link.readlink()):
            link.unlink()


def reset_host(containerd_root: Path | None = None) -> None:
    """Remove everything a node leaves on the host when its processes are gone (or were killed).

    Safe to call any time no node of ours is running: at the start of every node (a crashed run's
    leftovers) and at the end of :meth:`Node.stop` (whatever the orderly teardown missed).
    """
    for _ in range(50):
        doomed = _shim_pids() + _cgroup_pids()
        if not doomed:
            break
        _kill(doomed)
        time.sleep(0.1)
    unmount_under(STATE, KUBELET_ROOT, *([containerd_root] if containerd_root else []))
    _remove_cgroups()
    _delete_network()
    _kube_proxy_cleanup()
    _remove_log_links()
    restore_sysctls()
    shutil.rmtree(KUBELET_ROOT.parent, ignore_errors=True)
    shutil.rmtree(STATE, ignore_errors=True)


def record_sysctls() -> None:
    if not SYSCTL_RECORD.exists():
        SYSCTL_RECORD.write_text(json.dumps({k: _read_sysctl(k) for k in _SYSCTLS}))


def restore_sysctls() -> None:
    """Put back the values recorded before a node changed them (also those a crashed run left)."""
    try:
        recorded = json.loads(SYSCTL_RECORD.read_text())
    except (OSError, ValueError):
        return
    for key, value in recorded.items():
        if value and _read_sysctl(key) != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(value)
    SYSCTL_RECORD.unlink(missing_ok=True)


def _read_sysctl(key: str) -> str:
    try:
        return (Path("/proc/sys") / key).read_text().strip()
    except OSError:
        return ""


def make_cgroups() -> None:
    """/mpiop-e2e in every v1 hierarchy: the kubelet's cgroupRoot must exist (and cpuset must be filled)."""
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").is_file():
            continue
        ours = hierarchy / CGROUP_PARENT
        ours.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).is_file() and not (ours / name).read_text().strip():
                (ours / name).write_text((hierarchy / name).read_text())


class MachineBusyError(RuntimeError):
    """Another e2e node still held the machine when the wait ended."""


MACHINE_LOCK = Path("/run/mpiop-e2e.lock")
LOCK_WAIT_SECONDS = 3600.0


def take_machine_lock(path: Path, wait: float, poll: float = 2.0) -> IO[str]:
    """Hold `path`'s flock, waiting up to `wait` s for another e2e node on this machine to finish.

    The node owns machine-wide state (a bridge, iptables chains, cgroups), so two cannot run at once; a
    second `make e2e` (another worktree, another CI job) queues behind the first instead of failing.
    """
    handle = path.open("w")
    deadline = time.monotonic() + wait
    said = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise MachineBusyError(f"another mpiop e2e node still runs on this machine after {wait:.0f} s "
                                f"({path} is held)") from None
            if not said:
                log(f"another mpiop e2e node runs on this machine ({path} is held); waiting up to {wait:.0f} s")
                said = True
            time.sleep(poll)
