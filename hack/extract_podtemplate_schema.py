"""Refresh mpiop/api/podtemplatespec.schema.json from a real kube-apiserver of the pinned version.

Starts a throw-away control plane (etcd + kube-apiserver), reads GET /openapi/v3/api/v1 and writes the
definitions io.k8s.api.core.v1.PodTemplateSpec reaches, exactly as served. Run it (``make podtemplate-schema``)
after bumping the Kubernetes version, then ``make crds``. tests/integration/test_crd.py checks that the
committed snapshot still equals what the running apiserver serves.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from devcluster.controlplane import ControlPlane
from mpiop.api.podtemplate import OPENAPI_PATH, SNAPSHOT_PATH, snapshot_document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=SNAPSHOT_PATH, help="where to write the snapshot")
    args = parser.parse_args(argv)
    with ControlPlane(controller_manager=False) as plane:
        document = json.loads(plane.kubectl("get", "--raw", OPENAPI_PATH))
        version = json.loads(plane.kubectl("get", "--raw", "/version"))["gitVersion"]
    snapshot = snapshot_document(document, version)
    args.output.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.output} ({len(snapshot['schemas'])} definitions from kube-apiserver {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
