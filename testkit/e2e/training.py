"""The PyTorch DDP job (examples/pytorch/train_ddp.py given to the pods in a ConfigMap), shared by the training
and host-network scenarios."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from devcluster.pi_job import pi_job

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "train_ddp.py"
MOUNT = "/opt/train"
RANKS = 4
IDENTITY = re.compile(r"^rank (\d+)/(\d+) local (\d+)/(\S+) on (\S+): MASTER_ADDR=(\S+) MASTER_PORT=(\S+) "
                      r"WORLD_SIZE=(\S+)$", re.M)


def script_config_map() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-ddp"},
            "data": {"train_ddp.py": SCRIPT.read_text()}}


def with_script(pod_spec: dict[str, Any]) -> dict[str, Any]:
    pod_spec.setdefault("volumes", []).append({"name": "train", "configMap": {"name": "train-ddp"}})
    for container in pod_spec["containers"]:
        container.setdefault("volumeMounts", []).append({"name": "train", "mountPath": MOUNT})
    return pod_spec


def ddp_job(name: str, image: str, launcher_env: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """2 workers x 2 slots; the launcher runs `mpirun -n 4 python3 train_ddp.py` (examples/pytorch-ddp.yaml)."""
    command = ["mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root", "-n", str(RANKS),
               "python3", f"{MOUNT}/train_ddp.py"]
    manifest = pi_job(name, image, launcher_command=command, launcher_env=launcher_env, **spec)
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        with_script(replica["template"]["spec"])
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest
