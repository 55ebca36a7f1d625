"""Container images as OCI image layouts in a tar, the form ``ctr -n k8s.io images import`` takes: written from
uncompressed layer tars and a runtime config, with no Docker engine or registry in between."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Image:
    """A built image: its reference (``mpiop.local/name:tag``) and the OCI archive it is in.

    `base`: the image whose layers the archive refers to without carrying them (`SharedLayer`); containerd
    takes such an archive once it holds `base` (devcluster/node.py imports it first)."""

    ref: str
    archive: Path
    base: Image | None = None

    @property
    def manifest_digest(self) -> str:
        with tarfile.open(self.archive) as tar:
            member = tar.extractfile("index.json")
            assert member is not None
            index = json.load(member)
        return str(index["manifests"][0]["digest"])



@dataclass(frozen=True)
class SharedLayer:
    """An uncompressed layer another archive carries: named in the manifest, its blob left out."""

    digest: str  # hex, without "sha256:"
    size: int


def layers_of(archive: Path) -> list[SharedLayer]:
    """The layers of the (single) image in an OCI archive, as this module writes them."""
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "index.json"))
        manifest_digest = index["manifests"][0]["digest"].split(":")[1]
        manifest = json.loads(_member(tar, f"blobs/sha256/{manifest_digest}"))
    return [SharedLayer(layer["digest"].split(":")[1], int(layer["size"])) for layer in manifest["layers"]]


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    assert member is not None, name
    return member.read()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_oci_archive(out: Path, ref: str, layers: Sequence[Path | SharedLayer], config: dict[str, Any]) -> None:
    """An OCI image layout (oci-layout, index.json, blobs/) in a tar at `out`, from uncompressed layer tars.

    `config` is the image's runtime config (Env, Entrypoint, Cmd, WorkingDir, User). The layers go in
    uncompressed (media type ...layer.v1.tar): nothing to compress or decompress on a local import. A
    `SharedLayer` is named but not carried: a derived image does not repeat its base's gigabytes on disk.
    """
    layer_digests = [layer.digest if isinstance(layer, SharedLayer) else sha256_file(layer) for layer in layers]
    sizes = [layer.size if isinstance(layer, SharedLayer) else layer.stat().st_size for layer in layers]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    image_config = {
        "created": now, "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in layer_digests]},
        "history": [{"created": now, "created_by": "devcluster/images.py"} for _ in layers],
    }
    config_blob = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": f"sha256:{hashlib.sha256(config_blob).hexdigest()}", "size": len(config_blob)},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}", "size": size}
            for d, size in zip(layer_digests, sizes, strict=True)
        ],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    manifest_digest = hashlib.sha256(manifest_blob).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": f"sha256:{manifest_digest}", "size": len(manifest_blob),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
        }],
    }

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))

    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        add_bytes(tar, f"blobs/sha256/{manifest_digest}", manifest_blob)
        add_bytes(tar, f"blobs/sha256/{hashlib.sha256(config_blob).hexdigest()}", config_blob)
        for digest, layer in zip(layer_digests, layers, strict=True):
            if not isinstance(layer, SharedLayer):
                tar.add(str(layer), arcname=f"blobs/sha256/{digest}", recursive=False)
    partial.replace(out)
