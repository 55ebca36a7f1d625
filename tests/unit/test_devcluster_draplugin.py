"""The e2e node's fake DRA kubelet plugin, driven over its real unix sockets the way the kubelet calls it:
registration (GetInfo, NotifyRegistrationStatus), then NodePrepareResources / NodeUnprepareResources answering with
the devices the claim was allocated, read from a stand-in apiserver."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devcluster import draplugin

DRIVER = "gpu.test.mpiop.dev"
UID = "0f6c4f0e-1111-2222-3333-444455556666"


def claim(uid: str = UID, allocated: bool = True) -> dict[str, Any]:
    results = [{"request": "gpus", "driver": DRIVER, "pool": "node-a", "device": f"gpu-{i}"} for i in (1, 3)]
    results.append({"request": "nic", "driver": "nic.example.com", "pool": "node-a", "device": "eth1"})
    status = {"allocation": {"devices": {"results": results}}} if allocated else {}
    return {"metadata": {"name": "w-0-gpus", "namespace": "ns", "uid": uid}, "status": status}


class Claims:
    """The apiserver as the plugin reads it: one ResourceClaim, ns/w-0-gpus."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.found = found
        self.paths: list[str] = []

    def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        return self.found


@pytest.fixture
def served() -> Iterator[tuple[draplugin.Plugin, Claims]]:
    claims = Claims(claim())
    root = Path(tempfile.mkdtemp(prefix="dra-"))  # not tmp_path: a unix socket's path has at most 107 bytes
    plugin = draplugin.Plugin(DRIVER, root, claims)
    stop = threading.Event()
    thread = threading.Thread(target=draplugin.serve, args=(plugin, stop))
    thread.start()
    try:
        yield plugin, claims
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the plugin did not stop"
        assert not plugin.registration_socket.exists() and not plugin.dra_socket.exists(), "sockets left behind"
    finally:
        stop.set()
        thread.join(30)
        shutil.rmtree(root)


def call(socket: Path, method: str, request: Any, reply: Any) -> Any:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        rpc: grpc.UnaryUnaryMultiCallable[Any, Any] = channel.unary_unary(
            method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=reply.FromString)
        return rpc(request, timeout=30, wait_for_ready=True)


def test_registers_as_a_v1_dra_plugin_with_its_dra_socket(served: tuple[draplugin.Plugin, Claims]) -> None:
    plugin, _ = served
    registration = plugin.registration
    assert plugin.registration_socket.parent.name == "plugins_registry"
    info = call(plugin.registration_socket, "/pluginregistration.Registration/GetInfo", registration.InfoRequest(),
                registration.PluginInfo)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(plugin.dra_socket))
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    call(plugin.registration_socket, "/pluginregistration.Registration/NotifyRegistrationStatus",
         registration.RegistrationStatus(plugin_registered=True), registration.RegistrationStatusResponse)


def test_prepares_a_claim_with_its_allocated_devices_of_this_driver_and_unprepares_it(
        served: tuple[draplugin.Plugin, Claims]) -> None:
    plugin, claims = served
    dra = plugin.dra
    method = f"/{draplugin.DRA_SERVICE}/NodePrepareResources"
    request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid=UID, name="w-0-gpus")])
    prepared = call(plugin.dra_socket, method, request, dra.NodePrepareResourcesResponse)
    assert claims.paths == ["/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/w-0-gpus"]
    answer = prepared.claims[UID]
    assert answer.error == ""
    assert [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [
        (["gpus"], "node-a", "gpu-1", []), (["gpus"], "node-a", "gpu-3", [])]
    assert (plugin.claims / f"{UID}.json").read_text() == (
        '{"namespace": "ns", "name": "w-0-gpus", "devices": ["node-a/gpu-1", "node-a/gpu-3"]}')

    request = dra.NodeUnprepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid=UID, name="w-0-gpus")])
    unprepared = call(plugin.dra_socket, f"/{draplugin.DRA_SERVICE}/NodeUnprepareResources", request,
                      dra.NodeUnprepareResourcesResponse)
    assert list(unprepared.claims) == [UID] and unprepared.claims[UID].error == ""
    assert not (plugin.claims / f"{UID}.json").exists()


@pytest.mark.parametrize(("found", "error"), [
    (claim(uid="another-uid"), "its uid is another-uid, not " + UID),
    (claim(allocated=False), "the claim is not allocated"),
])
def test_a_claim_it_cannot_prepare_gets_an_error_naming_it(served: tuple[draplugin.Plugin, Claims],
                                                           found: dict[str, Any], error: str) -> None:
    plugin, claims = served
    claims.found = found
    dra = plugin.dra
    request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid=UID, name="w-0-gpus")])
    answer = call(plugin.dra_socket, f"/{draplugin.DRA_SERVICE}/NodePrepareResources", request,
                  dra.NodePrepareResourcesResponse).claims[UID]
    assert answer.error == f"reading ResourceClaim ns/w-0-gpus: {error}"
    assert not list(answer.devices) and not plugin.claims.exists()
