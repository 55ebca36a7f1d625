"""The smallest real DRA driver's kubelet plugin, for the e2e node: fake devices, prepared for real by the kubelet.

It registers with the kubelet through the plugin registration API (a socket in ``<kubelet root>/plugins_registry``,
``GetInfo``: type ``DRAPlugin``, the driver's name, its DRA socket and the gRPC services it serves) and serves the
kubelet's DRA API, ``k8s.io/kubelet/pkg/apis/dra/v1`` (service ``v1.DRAPlugin``, which kubelet 1.34 prefers to
``v1beta1.DRAPlugin``), on ``<kubelet root>/plugins/<driver>/dra.sock``. NodePrepareResources reads each claim from
the apiserver and answers with the devices the scheduler allocated it from this driver, with no CDI device IDs
(containerd 1.6 has no CDI: the devices are fake, a container gets nothing); it records each prepared claim in
``<kubelet root>/plugins/<driver>/claims/<uid>.json``, which NodeUnprepareResources removes. The driver publishes
no ResourceSlice itself: whoever runs it does (the e2e test, after the kubelet has started: the kubelet deletes
its node's slices when it starts).

The protos are copies of the kubelet's (``devcluster/protos``), compiled by grpcio-tools into the cache by
``python -m devcluster.node prepare`` (:func:`generated`); no generated code is committed.

Run: ``python -m devcluster.draplugin --driver NAME --kubeconfig PATH [--kubelet-root DIR]``; SIGTERM removes
its sockets (the kubelet then unregisters it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import shutil
import signal
import ssl
import sys
import threading
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import grpc
import yaml

from devcluster import images
from devcluster.binaries import BinaryError, build_lock, cache_dir
from devcluster.nodehost import KUBELET_ROOT

PROTOS = Path(__file__).with_name("protos")
REGISTRATION_SERVICE = "pluginregistration.Registration"  # the proto package is `pluginregistration`, not `.v1`
DRA_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
# What GetInfo's supported_versions lists for a DRA plugin: the gRPC services, `<version>.<service>`.
SUPPORTED_SERVICES = ("v1.DRAPlugin",)
JSON = dict[str, Any]


def generated() -> Path:
    """The directory of `<proto>_pb2.py` for each proto in devcluster/protos, compiled once per proto and
    grpcio-tools version (in-process, a fraction of a second; `devcluster.node prepare` does it first)."""
    sources = sorted(PROTOS.glob("*.proto"))
    key = images.cache_key(importlib.metadata.version("grpcio-tools"), *(p.name + p.read_text() for p in sources))
    out = cache_dir() / "draplugin" / key
    with build_lock(out.parent):
        if all((out / f"{p.stem}_pb2.py").is_file() for p in sources):
            return out
        from grpc_tools import protoc  # the compiler, needed only here

        partial = out.with_name(f"{key}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        code = protoc.main(["protoc", f"-I{PROTOS}", f"--python_out={partial}", *map(str, sources)])
        if code != 0:
            raise BinaryError(f"compiling {', '.join(p.name for p in sources)} failed (protoc exit {code})")
        partial.rename(out)
        return out


def load(stem: str) -> ModuleType:
    """A generated `<stem>_pb2` module (its messages are not typed: they are made at run time)."""
    path = generated() / f"{stem}_pb2.py"
    spec = importlib.util.spec_from_file_location(f"devcluster_draplugin_{stem}_pb2", path)
    if spec is None or spec.loader is None:
        raise BinaryError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def allocated(claim: JSON, driver: str) -> list[tuple[str, str, str]]:
    """(request, pool, device) of each device the claim was allocated from `driver`; ValueError if unallocated."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ValueError("the claim is not allocated")
    results = (allocation.get("devices") or {}).get("results") or []
    return [(r["request"], r["pool"], r["device"]) for r in results if r.get("driver") == driver]


class ClaimReader(Protocol):
    def get(self, path: str) -> JSON: ...


@dataclass(frozen=True)
class Apiserver:
    """GETs as the kubeconfig's current user (client certificate files, as devcluster writes them)."""

    server: str
    context: ssl.SSLContext

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Apiserver:
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        current = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == current["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == current["user"])
        tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        tls.load_cert_chain(user["client-certificate"], user["client-key"])
        return cls(cluster["server"], tls)

    def get(self, path: str) -> JSON:
        with urllib.request.urlopen(self.server + path, context=self.context, timeout=10) as response:
            found: JSON = json.loads(response.read())
            return found


class Plugin:
    """The gRPC methods: registration (GetInfo, NotifyRegistrationStatus) and DRA (Node(Un)PrepareResources)."""

    def __init__(self, driver: str, kubelet_root: Path, api: ClaimReader) -> None:
        self.driver = driver
        self.directory = kubelet_root / "plugins" / driver
        self.dra_socket = self.directory / "dra.sock"
        self.registration_socket = kubelet_root / "plugins_registry" / f"{driver}-reg.sock"
        self.claims = self.directory / "claims"
        self.api = api
        self.registration = load("pluginregistration")
        self.dra = load("dra")

    def get_info(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.registration.PluginInfo(type="DRAPlugin", name=self.driver, endpoint=str(self.dra_socket),
                                            supported_versions=list(SUPPORTED_SERVICES))

    def notify(self, request: Any, context: grpc.ServicerContext) -> Any:
        say(f"registered with the kubelet as {self.driver}" if request.plugin_registered
            else f"the kubelet refused the registration: {request.error}")
        return self.registration.RegistrationStatusResponse()

    def prepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = response.claims[claim.uid]
            where = f"{claim.namespace}/{claim.name}"
            try:
                found = self.api.get(f"/apis/resource.k8s.io/v1/namespaces/{claim.namespace}/resourceclaims/"
                                     f"{claim.name}")
                if found["metadata"]["uid"] != claim.uid:
                    raise ValueError(f"its uid is {found['metadata']['uid']}, not {claim.uid}")
                devices = allocated(found, self.driver)
            except (OSError, ValueError, KeyError) as err:  # urllib's errors are OSErrors
                answer.error = f"reading ResourceClaim {where}: {err}"
                say(f"NodePrepareResources {where}: {answer.error}")
                continue
            for request_name, pool, device in devices:
                answer.devices.add(request_names=[request_name], pool_name=pool, device_name=device)
            self.claims.mkdir(parents=True, exist_ok=True)
            record = {"namespace": claim.namespace, "name": claim.name,
                      "devices": [f"{pool}/{device}" for _, pool, device in devices]}
            (self.claims / f"{claim.uid}.json").write_text(json.dumps(record))
            say(f"NodePrepareResources {where} ({claim.uid}): {', '.join(record['devices'])}")
        return response

    def unprepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].SetInParent()  # every claim has an entry, an empty one when done
            (self.claims / f"{claim.uid}.json").unlink(missing_ok=True)
            say(f"NodeUnprepareResources {claim.namespace}/{claim.name} ({claim.uid})")
        return response


def say(line: str) -> None:
    print(f"draplugin: {line}", flush=True)


Method = Callable[[Any, grpc.ServicerContext], Any]


def _server(socket: Path, service: str, methods: dict[str, tuple[Method, Any]]) -> grpc.Server:
    """A server of `service`'s unary `methods` (name -> (handler, request message class)) on the unix `socket`."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        name: grpc.unary_unary_rpc_method_handler(handler, request_deserializer=message.FromString,
                                                  response_serializer=lambda reply: reply.SerializeToString())
        for name, (handler, message) in methods.items()}
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    socket.unlink(missing_ok=True)  # a killed run's
    socket.parent.mkdir(parents=True, exist_ok=True)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


def serve(plugin: Plugin, stop: threading.Event) -> None:
    """Serve the DRA API, then register (the kubelet may call it at once), until `stop` is set."""
    dra, registration = plugin.dra, plugin.registration
    servers = [
        _server(plugin.dra_socket, DRA_SERVICE, {
            "NodePrepareResources": (plugin.prepare, dra.NodePrepareResourcesRequest),
            "NodeUnprepareResources": (plugin.unprepare, dra.NodeUnprepareResourcesRequest)}),
        _server(plugin.registration_socket, REGISTRATION_SERVICE, {
            "GetInfo": (plugin.get_info, registration.InfoRequest),
            "NotifyRegistrationStatus": (plugin.notify, registration.RegistrationStatus)}),
    ]
    say(f"serving {plugin.driver}: registration {plugin.registration_socket}, DRA {plugin.dra_socket}")
    stop.wait()
    for server in reversed(servers):
        server.stop(grace=1).wait()
    plugin.registration_socket.unlink(missing_ok=True)
    plugin.dra_socket.unlink(missing_ok=True)
    say("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.draplugin",
                                     description="a fake DRA driver's kubelet plugin")
    parser.add_argument("--driver", required=True, help="the DRA driver's name (its ResourceSlices' driver)")
    parser.add_argument("--kubeconfig", required=True, type=Path, help="to read the ResourceClaims it prepares")
    parser.add_argument("--kubelet-root", type=Path, default=KUBELET_ROOT, help="the kubelet's --root-dir")
    args = parser.parse_args(argv)
    plugin = Plugin(args.driver, args.kubelet_root, Apiserver.from_kubeconfig(args.kubeconfig))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    serve(plugin, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
