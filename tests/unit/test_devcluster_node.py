"""The e2e node's pure parts: OCI archives ctr can import, and the configs the node writes."""

from __future__ import annotations

import hashlib
import json
import tarfile
import tomllib
from pathlib import Path

from devcluster import nodehost, nodeparts, oci


def test_oci_archive_layout(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        payload = tmp_path / "hello"
        payload.write_text("hi")
        tar.add(payload, arcname="hello")
    out = tmp_path / "image.tar"
    oci.write_oci_archive(out, "mpiop.local/test:abc", [layer], {"Cmd": ["/hello"]})

    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        entry = index["manifests"][0]
        assert entry["annotations"]["io.containerd.image.name"] == "mpiop.local/test:abc"
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "abc"
        manifest_blob = tar.extractfile(f"blobs/sha256/{entry['digest'].split(':')[1]}").read()  # type: ignore[union-attr]
        assert hashlib.sha256(manifest_blob).hexdigest() == entry["digest"].split(":")[1]
        manifest = json.loads(manifest_blob)
        config = json.load(tar.extractfile(f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"))  # type: ignore[arg-type]
    layer_digest = hashlib.sha256(layer.read_bytes()).hexdigest()
    assert {"oci-layout", "index.json", f"blobs/sha256/{layer_digest}"} <= names
    assert manifest["layers"] == [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                   "digest": f"sha256:{layer_digest}", "size": layer.stat().st_size}]
    assert config["rootfs"]["diff_ids"] == [f"sha256:{layer_digest}"]
    assert config["config"] == {"Cmd": ["/hello"]}
    assert oci.Image("mpiop.local/test:abc", out).manifest_digest == entry["digest"]


def test_containerd_config_respects_this_machine(tmp_path: Path) -> None:
    config = tomllib.loads(nodeparts.containerd_config(tmp_path / "root", "mpiop.local/pause:x"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE: runc fails every sandbox otherwise
    assert cri["sandbox_image"] == "mpiop.local/pause:x"
    assert cri["netns_mounts_under_state_dir"] is True  # teardown unmounts them with the rest of the state
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert config["grpc"]["address"] == str(nodehost.STATE / "containerd.sock")


def test_kubelet_and_cni_configs(tmp_path: Path) -> None:
    kubelet = nodeparts.kubelet_config(tmp_path / "ca.crt", 10250, 10248, tmp_path / "resolv.conf", tmp_path / "logs")
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["failCgroupV1"] is False
    assert kubelet["clusterDNS"] == [nodehost.GATEWAY]
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["cgroupRoot"] == f"/{nodehost.CGROUP_PARENT}"
    cni = nodeparts.cni_config()
    assert [p["type"] for p in cni["plugins"]] == ["bridge", "portmap"]
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == nodehost.BRIDGE and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": nodehost.POD_SUBNET, "gateway": nodehost.GATEWAY}


def test_unmount_under_touches_nothing_outside(tmp_path: Path) -> None:
    assert nodehost.unmount_under(tmp_path / "nothing-mounted-here") == 0


def test_machine_lock_waits_for_the_holder_then_takes_it(tmp_path: Path) -> None:
    import fcntl
    import threading

    import pytest

    from devcluster.nodehost import MachineBusyError, take_machine_lock

    lock = tmp_path / "e2e.lock"
    holder = lock.open("w")
    fcntl.flock(holder, fcntl.LOCK_EX)
    with pytest.raises(MachineBusyError, match="still runs"):
        take_machine_lock(lock, wait=0.2, poll=0.05)

    threading.Timer(0.3, holder.close).start()
    taken = take_machine_lock(lock, wait=5.0, poll=0.05)
    with pytest.raises(BlockingIOError):
        fcntl.flock(lock.open("w"), fcntl.LOCK_EX | fcntl.LOCK_NB)
    taken.close()


def test_the_bridge_mac_is_fixed_and_derived_from_the_gateway_as_the_cni_plugin_does() -> None:
    """A locally administered unicast MAC (0a: bit 1 set, bit 0 clear) that never follows the bridge's ports."""
    assert nodehost.bridge_mac("10.244.0.1") == "0a:58:0a:f4:00:01"
    assert nodehost.bridge_mac() == nodehost.bridge_mac(nodehost.GATEWAY)
    first = int(nodehost.bridge_mac().split(":")[0], 16)
    assert first & 0b10 and not first & 0b01
