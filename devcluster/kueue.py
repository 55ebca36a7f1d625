"""Kueue (sigs.k8s.io/kueue), the real controller manager, run beside a control plane of ours.

* ``kueue_binary()``: ``cmd/kueue`` built once into ``.cache/kueue/<version>/bin`` on the Kubernetes binaries'
  modules (devcluster/pinned.py), by ``python -m devcluster.kueue`` (``make test-binaries``); with MPIOP_NO_BUILD
  (the test session in CI) a test never builds it itself.
* ``kueue_crds()``: Kueue's CRDs as its own kustomization installs them: the bases, with the conversion webhook
  patches applied (the v1beta1 <-> v1beta2 conversion of five of them goes through Kueue's webhook server).
* ``kueue_webhooks()``: its webhook configurations, with the webhooks of its own API, and its MPIJob webhooks for
  namespaces labelled JOB_WEBHOOKS_LABEL only.
* ``Kueue``: the manager on loopback ports, integration ``kubeflow.org/mpijob`` only, no leader election.

How it runs without a Pod network. Kueue's manager refuses to start without TLS material: with
``internalCertManagement`` off it reads the metrics certificate from a fixed ``/etc/kueue/metrics/certs``; with it
on (its default, used here) it makes a CA and a serving certificate for ``<service>.<namespace>.svc`` into a
Secret, and injects the CA into its webhook configurations (skipped when they do not exist) and into its CRDs'
conversion webhooks (it waits for that, so the CRDs need the conversion stanza its kustomization adds). It then
waits for the certificate files in its cert dir, where a kubelet would mount the Secret: ``Kueue`` plays that
kubelet, writing the Secret's tls.crt and tls.key there while Kueue starts. The apiserver reaches a webhook Service
by its ClusterIP, which nothing routes here (no kube-proxy); an ``ExternalName`` Service is resolved to its name
instead, so ``kueue-webhook-service`` is one naming ``localhost``, and Kueue's webhook server listens on 127.0.0.1
at the port the CRDs and webhooks name: conversion and admission work, with TLS checked against the injected CA. Of
its admission webhooks those of its own API (kueue.x-k8s.io) are installed, and its MPIJob webhooks for the
namespaces labelled JOB_WEBHOOKS_LABEL=true, and removed when it stops: the control plane is shared with other
tests, and its job webhooks would judge their Jobs and Pods too (and refuse them once Kueue is gone). Its other
job webhooks (Jobs, Pods, ...) are left out.
"""

from __future__ import annotations

import base64
import copy
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster import binaries, pinned
from devcluster.controlplane import Component, ControlPlane, ControlPlaneError, free_port
from devcluster.versions import KUEUE_KUBERNETES_VERSION, KUEUE_VERSION

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_COMMAND = f"{KUEUE_MODULE}/cmd/kueue"
CONFIG_DIR = "config/components"  # in the module: crd/ (kustomization.yaml, bases/, patches/), webhook/
WEBHOOKS = "webhook/manifests.yaml"
JOB_WEBHOOKS_LABEL = "test.mpiop.dev/kueue-job-webhooks"  # a namespace whose MPIJobs Kueue's webhooks judge
NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
MPIJOB_FRAMEWORK = "kubeflow.org/mpijob"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
API_GROUP = "kueue.x-k8s.io"
API_VERSION = f"{API_GROUP}/v1beta2"
# Kueue's DRA support (beta and on from v0.18, gate KueueDRAIntegration; v0.19 removed DynamicResourceAllocation):
# the devices a pod set's ResourceClaimTemplates ask of a mapped DeviceClass count, per pod, in quota of the
# mapping's resource name.
DRA_DEVICE_CLASS = "gpu.nvidia.com"  # NVIDIA's DRA driver's class of whole GPUs
DRA_GPU_RESOURCE = "gpu.nvidia.com/devices"  # its quota resource in a ClusterQueue, and a Workload's usage


def _root(version: str) -> Path:
    return binaries.cache_dir() / "kueue" / version


def kueue_ldflags(version: str = KUEUE_VERSION) -> str:
    """Its log's `Initializing gitVersion=...` names the release (the module proxy serves no commit hash)."""
    package = f"{KUEUE_MODULE}/pkg/version"
    return f"-s -w -X {package}.GitVersion={version} -X {package}.GitCommit={version}"


def kueue_binary(version: str = KUEUE_VERSION) -> Path:
    """Kueue's manager, built once (`make test-binaries`); a build another process runs is waited for."""
    bin_dir = pinned.build_pinned(_root(version), {"kueue": KUEUE_COMMAND}, require=f"{KUEUE_MODULE} {version}",
                                  what=f"Kueue {version}", ldflags=kueue_ldflags(version),
                                  unpinned=["github.com/spf13/pflag"], kubernetes_version=KUEUE_KUBERNETES_VERSION)
    return bin_dir / "kueue"


def kueue_config_dir(version: str = KUEUE_VERSION) -> Path:
    """The module's config/components/crd (kustomization, bases, patches) and webhook/manifests.yaml, copied once
    into the cache."""
    root = _root(version) / "config"  # its own lock: not held up by a build of the manager
    with binaries.build_lock(root):
        if not (root / "crd" / "kustomization.yaml").is_file():
            source = binaries.go_mod_download(KUEUE_MODULE, version, root, "Dir") / CONFIG_DIR
            (root / "webhook").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / WEBHOOKS, root / WEBHOOKS)
            for part in ("crd/bases", "crd/patches"):
                shutil.rmtree(root / part, ignore_errors=True)
                shutil.copytree(source / part, root / part)
            for copied in (root, *root.rglob("*")):
                copied.chmod(0o755 if copied.is_dir() else 0o644)  # the module cache's copies are read-only
            shutil.copyfile(source / "crd/kustomization.yaml", root / "crd/kustomization.yaml")  # last: marks it
    return root


def kueue_crds(namespace: str, webhook_port: int, version: str = KUEUE_VERSION) -> list[dict[str, Any]]:
    """Every CRD of Kueue's kustomization, each conversion patch applied with its Service named as installed
    here (kustomize's prefix and namespace: `kueue-webhook-service` in `namespace`) at `webhook_port`."""
    crds = kueue_config_dir(version) / "crd"
    kustomization = yaml.safe_load((crds / "kustomization.yaml").read_text())
    by_name = {}
    for resource in kustomization["resources"]:
        body = yaml.safe_load((crds / resource).read_text())
        by_name[body["metadata"]["name"]] = body
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((crds / entry["path"]).read_text())
        if set(patch["spec"]) != {"conversion"}:
            raise binaries.BinaryError(f"{entry['path']} of Kueue {version} patches more than spec.conversion")
        conversion = copy.deepcopy(patch["spec"]["conversion"])
        conversion["webhook"]["clientConfig"]["service"] |= {"namespace": namespace, "name": WEBHOOK_SERVICE,
                                                             "port": webhook_port}
        by_name[patch["metadata"]["name"]]["spec"]["conversion"] = conversion
    return list(by_name.values())


def _is_mpijob_webhook(webhook: dict[str, Any]) -> bool:
    return {(g, r) for rule in webhook["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("kubeflow.org", "mpijobs")}


def kueue_webhooks(namespace: str, webhook_port: int, version: str = KUEUE_VERSION) -> list[dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, named as its kustomization names them (the names
    its certificate rotator injects the CA into), with the webhooks of Kueue's own API (they default its objects
    and keep, e.g., a Workload's pod sets from changing once it holds quota) and its MPIJob webhooks (which
    suspend a new job of a queue, and guard its queue name) for namespaces labelled JOB_WEBHOOKS_LABEL=true."""
    configurations = []
    for body in yaml.safe_load_all((kueue_config_dir(version) / WEBHOOKS).read_text()):
        if not body:
            continue
        body["metadata"]["name"] = f"kueue-{body['metadata']['name']}"
        body["webhooks"] = [w for w in body["webhooks"]
                            if {g for rule in w["rules"] for g in rule["apiGroups"]} == {API_GROUP}
                            or _is_mpijob_webhook(w)]
        for webhook in body["webhooks"]:
            if _is_mpijob_webhook(webhook):
                webhook["namespaceSelector"] = {"matchLabels": {JOB_WEBHOOKS_LABEL: "true"}}
            webhook["clientConfig"]["service"] |= {"namespace": namespace, "name": WEBHOOK_SERVICE,
                                                   "port": webhook_port}
        configurations.append(body)
    return configurations


def webhook_objects(namespace: str, webhook_port: int) -> list[dict[str, Any]]:
    """Kueue's namespace, the empty Secret its certificate rotator fills (it does not create one), and its
    webhook Service as the ExternalName `localhost`, which the apiserver dials at the port a CRD names."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": namespace}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEBHOOK_SERVICE, "namespace": namespace},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": webhook_port}]}},
    ]


def kueue_config(namespace: str, *, webhook_port: int, metrics_port: int, health_port: int,
                 cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2): its defaults but for loopback addresses, one
    replica (no leader election), MPIJobs only, no visibility API server (it would bind a fixed port), and its DRA
    support on, with DRA_DEVICE_CLASS's devices counted as DRA_GPU_RESOURCE."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "integrations": {"frameworks": [MPIJOB_FRAMEWORK]},
        "featureGates": {"VisibilityOnDemand": False},  # its DRA integration (KueueDRAIntegration) is on by default
        "resources": {"deviceClassMappings": [{"name": DRA_GPU_RESOURCE, "deviceClassNames": [DRA_DEVICE_CLASS]}]},
    }


@dataclass
class Kueue:
    """Kueue's manager against `control_plane`, its CRDs installed first. Context manager, or start()/stop().
    Stopping it leaves the CRDs and objects: whatever holds a Kueue finalizer is the caller's to delete first."""

    control_plane: ControlPlane
    namespace: str = NAMESPACE
    version: str = KUEUE_VERSION
    webhook_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    component: Component | None = None
    webhooks: list[dict[str, Any]] = field(default_factory=list)

    def __enter__(self) -> Kueue:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log(self) -> Path:
        assert self.control_plane.workdir is not None
        return self.control_plane.workdir / "logs" / "kueue.log"

    def start(self, timeout: float = 180.0) -> None:
        binary = kueue_binary(self.version)
        crds = kueue_crds(self.namespace, self.webhook_port, self.version)
        assert self.control_plane.workdir is not None
        workdir = self.control_plane.workdir / "kueue"
        workdir.mkdir(parents=True, exist_ok=True)
        self.webhooks = kueue_webhooks(self.namespace, self.webhook_port, self.version)
        documents = [*webhook_objects(self.namespace, self.webhook_port), *crds, *self.webhooks]
        self.control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                                   input_text=yaml.safe_dump_all(documents))
        self.control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                                   *(f"crd/{c['metadata']['name']}" for c in crds))
        config = workdir / "config.yaml"
        config.write_text(yaml.safe_dump(kueue_config(
            self.namespace, webhook_port=self.webhook_port, metrics_port=self.metrics_port,
            health_port=self.health_port, cert_dir=workdir / "serving-certs")))
        self.component = Component("kueue", [str(binary), f"--config={config}",
                                             f"--kubeconfig={self.control_plane.kubeconfig}"], self.log)
        self.component.start(self.control_plane.tie_to_parent)
        self._wait_ready(workdir / "serving-certs", time.monotonic() + timeout)

    def _mount_secret(self, cert_dir: Path) -> None:
        """What the kubelet does for a Secret volume: its keys as files, rewritten when they change."""
        secret = self.control_plane.get(f"/api/v1/namespaces/{self.namespace}/secrets/{WEBHOOK_SECRET}")
        data = secret.get("data") or {} if isinstance(secret, dict) else {}
        for key in ("tls.crt", "tls.key"):
            if key in data and (content := base64.b64decode(data[key])) != _read(cert_dir / key):
                cert_dir.mkdir(parents=True, exist_ok=True)
                (cert_dir / f".{key}").write_bytes(content)
                (cert_dir / f".{key}").replace(cert_dir / key)

    def _wait_ready(self, cert_dir: Path, deadline: float) -> None:
        """Ready (its /readyz) once its certificates are made, injected and mounted, and its webhook server serves;
        until then the Secret is mirrored into `cert_dir` (it may change while the rotator starts)."""
        assert self.component is not None
        while time.monotonic() < deadline:
            if not self.component.running():
                raise ControlPlaneError(f"kueue exited while starting:\n{self.component.log_tail()}")
            self._mount_secret(cert_dir)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ControlPlaneError(f"kueue not ready in time:\n{self.component.log_tail()}")

    def stop(self) -> None:
        """Its webhook configurations go first: no Kueue object could be written with them and Kueue gone."""
        for webhook in self.webhooks:
            self.control_plane.kubectl("delete", "--ignore-not-found", f"{webhook['kind'].lower()}",
                                       webhook["metadata"]["name"], check=False)
        if self.component is not None:
            self.component.stop()


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


if __name__ == "__main__":
    print(kueue_config_dir())
    print(kueue_binary())
