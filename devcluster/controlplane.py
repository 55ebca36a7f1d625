"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Used by the pytest fixtures and by ``python -m devcluster``. Every component runs as a child process that
the kernel kills if its parent dies (PR_SET_PDEATHSIG), so an interrupted test run leaks nothing; a
clean stop terminates them in reverse order and removes the work directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster import binaries
from devcluster.certs import CertificateAuthority, KeyPair, service_account_key

SERVICE_CIDR = "10.96.0.0/16"
# kube-apiserver flags that only say where things are (addresses, ports, files): left out of `describe()`.
_PLUMBING_FLAGS = frozenset({
    "--advertise-address", "--bind-address", "--secure-port", "--etcd-servers", "--cert-dir", "--tls-cert-file",
    "--tls-private-key-file", "--client-ca-file", "--service-account-key-file",
    "--service-account-signing-key-file", "--kubelet-client-certificate", "--kubelet-client-key",
})
_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """A component did not start or did not become ready."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the parent goes away."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    cwd: Path | None = None  # a Python module's (`python -m devcluster...`) checkout

    def start(self, tie_to_parent: bool) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                preexec_fn=die_with_parent if tie_to_parent else None,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace_seconds: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@dataclass
class ControlPlane:
    """One control plane in its own directory. Use as a context manager, or start()/stop()."""

    workdir: Path | None = None
    controller_manager: bool = True
    scheduler: bool = False
    tie_to_parent: bool = True
    extra_apiserver_flags: Sequence[str] = ()
    # Opt-in only (the default control plane runs every component with production defaults): feature gates set
    # alike on the apiserver, controller-manager and scheduler, e.g. {"DRADeviceTaints": True}, and API groups
    # the apiserver serves beyond its defaults (--runtime-config), e.g. ("resource.k8s.io/v1alpha3=true",).
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Sequence[str] = ()
    # More names/IPs on the apiserver's serving cert (e.g. the address pods reach it at on a real node).
    serving_hosts: Sequence[str] = ()
    # A client cert the apiserver shows kubelets (logs, exec) that authenticate clients by the cluster CA.
    kubelet_client: bool = False
    components: list[Component] = field(default_factory=list)
    api_port: int = 0
    _owns_workdir: bool = False

    # -- paths -------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "pki"

    # -- life cycle --------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def advertises_reachable_address(self) -> bool:
        return any(flag.startswith("--advertise-address=") for flag in self.extra_apiserver_flags)

    def start(self, timeout: float = 120.0) -> None:
        wanted = ["etcd", "kube-apiserver", "kubectl"]
        wanted += ["kube-controller-manager"] if self.controller_manager else []
        wanted += ["kube-scheduler"] if self.scheduler else []
        paths = binaries.ensure_all(wanted)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mpiop-cp-"))
            self._owns_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        try:
            self._start(paths, timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, paths: dict[str, Path], timeout: float) -> None:
        assert self.workdir is not None
        ca = CertificateAuthority(self.pki)
        serving = ca.issue(
            "apiserver", common_name="kube-apiserver", server=True,
            hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "10.96.0.1", *self.serving_hosts),
        )
        admin = ca.issue("admin", common_name="mpiop-admin", organizations=("system:masters",))
        sa_key = service_account_key(self.pki)
        kubelet_flags: list[str] = []
        if self.kubelet_client:
            to_kubelet = ca.issue("kubelet-client", common_name="kube-apiserver-kubelet-client",
                                  organizations=("system:masters",))
            kubelet_flags = [f"--kubelet-client-certificate={to_kubelet.cert}",
                             f"--kubelet-client-key={to_kubelet.key}"]
        self.api_port = free_port()
        self._write_kubeconfig(self.kubeconfig, ca.pair, admin)

        etcd_port, etcd_peer = free_port(), free_port()
        etcd_data = Path(tempfile.mkdtemp(prefix="mpiop-etcd-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
        (self.workdir / "etcd-data").symlink_to(etcd_data)
        self.launch("etcd", [
            str(paths["etcd"]), "--name=default", f"--data-dir={etcd_data}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=default=http://127.0.0.1:{etcd_peer}",
            "--logger=zap", "--log-level=warn",
        ])
        self.launch("kube-apiserver", [
            str(paths["kube-apiserver"]),
            "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1",
            # From v1.37 the endpoint reconciler refuses a loopback advertise address ("may not be in the loopback
            # range"): the `kubernetes` Service's endpoints then name nothing, which no client on loopback reads.
            # A plane pods reach (the e2e node) advertises its own address and keeps the reconciler.
            *([] if self.advertises_reachable_address else ["--endpoint-reconciler-type=none"]),
            f"--secure-port={self.api_port}",
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={self.pki}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={ca.pair.cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--v=1",
            *kubelet_flags,
            *self.gate_flags(),
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
            *self.extra_apiserver_flags,
        ])
        deadline = time.monotonic() + timeout
        self.wait_ready("kube-apiserver", lambda: self.get("/readyz") is not None, deadline)

        # What kube-controller-manager and kube-scheduler share: admin credentials, no leader election,
        # their own serving port on loopback.
        client_flags = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1",
        ]
        if self.controller_manager:
            self.launch("kube-controller-manager", [
                str(paths["kube-controller-manager"]), *client_flags, f"--secure-port={free_port()}",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca.pair.cert}",
                "--use-service-account-credentials=false",
                # Snappy garbage collection and namespace cleanup for tests.
                "--concurrent-gc-syncs=10",
                "--v=1",
                *self.gate_flags(),
            ])
        if self.scheduler:
            self.launch("kube-scheduler", [
                str(paths["kube-scheduler"]), *client_flags, f"--secure-port={free_port()}", "--v=1",
                *self.gate_flags(),
            ])
        if self.controller_manager:
            # The ServiceAccount controller making `default` proves the controller manager is serving.
            self.wait_ready(
                "kube-controller-manager",
                lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
                deadline,
            )

    def gate_flags(self) -> list[str]:
        """`--feature-gates=...` for every component, or nothing when none is set (each its own default)."""
        if not self.feature_gates:
            return []
        gates = sorted(self.feature_gates.items())
        return ["--feature-gates=" + ",".join(f"{gate}={str(on).lower()}" for gate, on in gates)]

    def launch(self, name: str, argv: list[str]) -> None:
        """Start one more component (the simulated cluster adds kwok), logging to logs/<name>.log."""
        assert self.workdir is not None
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        component.start(self.tie_to_parent)
        self.components.append(component)

    def wait_ready(self, name: str, ready: Callable[[], bool], deadline: float) -> None:
        """Poll `ready` until `deadline`; a component that exits meanwhile fails the wait with its log tail."""
        while time.monotonic() < deadline:
            dead = [c for c in self.components if not c.running()]
            if dead:
                c = dead[0]
                raise ControlPlaneError(f"{c.name} exited while waiting for {name}:\n{c.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        tails = "\n".join(f"--- {c.name}\n{c.log_tail(15)}" for c in self.components)
        raise ControlPlaneError(f"{name} not ready in time\n{tails}")

    def kill(self, name: str) -> None:
        """SIGKILL one component (an outage: no graceful shutdown, its clients' connections just break)."""
        component = self._component(name)
        if component.process is not None and component.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.process.pid, signal.SIGKILL)
            component.process.wait(timeout=10)

    def revive(self, name: str) -> None:
        """Start a killed component again with the same flags (same port, certificates and etcd)."""
        self._component(name).start(self.tie_to_parent)

    def _component(self, name: str) -> Component:
        for component in self.components:
            if component.name == name:
                return component
        raise ControlPlaneError(f"no component {name!r}; running: {[c.name for c in self.components]}")

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if self.workdir is not None:
            etcd_link = self.workdir / "etcd-data"
            if etcd_link.is_symlink():
                shutil.rmtree(etcd_link.resolve(), ignore_errors=True)
                etcd_link.unlink()
            if self._owns_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> list[int]:
        return list(self.pids_by_name().values())

    def describe(self) -> dict[str, Any]:
        """What runs: etcd's and kube-apiserver's `--version` (etcd's Git SHA too) and the apiserver's flags other than
        addresses and files (every setting not named there is the apiserver's production default)."""
        argv = {c.name: c.argv for c in self.components}
        described: dict[str, Any] = {}
        for name in ("etcd", "kube-apiserver"):
            if name in argv:
                out = subprocess.run([argv[name][0], "--version"], capture_output=True, text=True, timeout=30,
                                     check=False).stdout
                # etcd: "etcd Version: 3.6.16, Git SHA: v3.6.16"; the apiserver: "Kubernetes v1.34.4".
                described[name] = ", ".join(line.strip() for line in out.splitlines()[:2]) if out else "unknown"
        described["apiserver_flags"] = [f for f in argv.get("kube-apiserver", [])[1:]
                                        if f.split("=", 1)[0] not in _PLUMBING_FLAGS]
        return described

    def pids_by_name(self) -> dict[str, int]:
        """Each running component's process id by its name (etcd, kube-apiserver, kwok, ...)."""
        return {c.name: c.process.pid for c in self.components if c.process is not None}

    # -- client helpers ----------------------------------------------------------------------------
    def _write_kubeconfig(self, path: Path, ca: KeyPair, user: KeyPair) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mpiop-dev", "cluster": {
                "server": self.server, "certificate-authority": str(ca.cert)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(user.cert), "client-key": str(user.key)}}],
            "contexts": [{"name": "mpiop-dev", "context": {"cluster": "mpiop-dev", "user": "admin"}}],
            "current-context": "mpiop-dev",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def get(self, path: str) -> Any:
        """GET `path` as admin: the decoded JSON (or text), None while the apiserver does not answer."""
        try:
            with urllib.request.urlopen(self.server + path, context=self.ssl_context(), timeout=5) as resp:
                body = resp.read()
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return None
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        """Run the pinned kubectl against this control plane; return stdout."""
        result = subprocess.run(
            [str(binaries.kube_binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text, capture_output=True, text=True, check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout
