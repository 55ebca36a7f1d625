"""The PyTorch DDP job (examples/pytorch/train_ddp.py given to the pods in a ConfigMap) and the checks of its
result against a single-process run, shared by the training, host-network and exec-launch scenarios."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from devcluster.pi_job import pi_job
from testkit.e2e.kube import PODS, wait_for
from testkit.e2e.session import E2E, REPORT

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "train_ddp.py"
PROGRESS_CLIENT = SCRIPT.parents[2] / "mpiop" / "progress_client.py"  # copied beside the script, as a user would
MOUNT = "/opt/train"
RANKS = 4
# mpirun as the SSH launcher starts it: once every worker's sshd answers, as root.
SSH_MPIRUN = ("mpi-wait-hosts", "mpirun.openmpi", "--allow-run-as-root")
# The single-process reference runs in any namespace, a restricted one too.
REFERENCE_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
REFERENCE_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
IDENTITY = re.compile(r"^rank (\d+)/(\d+) local (\d+)/(\S+) on (\S+): MASTER_ADDR=(\S+) MASTER_PORT=(\S+) "
                      r"WORLD_SIZE=(\S+)$", re.M)


def script_config_map() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-ddp"},
            "data": {"train_ddp.py": SCRIPT.read_text(), "progress_client.py": PROGRESS_CLIENT.read_text()}}


def with_script(pod_spec: dict[str, Any]) -> dict[str, Any]:
    pod_spec.setdefault("volumes", []).append({"name": "train", "configMap": {"name": "train-ddp"}})
    for container in pod_spec["containers"]:
        container.setdefault("volumeMounts", []).append({"name": "train", "mountPath": MOUNT})
    return pod_spec


def ddp_job(name: str, image: str, launcher_env: list[dict[str, Any]] | None = None,
            annotations: dict[str, str] | None = None, mpirun: tuple[str, ...] = SSH_MPIRUN,
            **spec: Any) -> dict[str, Any]:
    """2 workers x 2 slots; the launcher runs `mpirun -n 4 python3 train_ddp.py` (examples/pytorch-ddp.yaml)."""
    command = [*mpirun, "-n", str(RANKS), "python3", f"{MOUNT}/train_ddp.py"]
    manifest = pi_job(name, image, launcher_command=command, launcher_env=launcher_env, **spec)
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        with_script(replica["template"]["spec"])
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    return manifest


FIRST = re.compile(r"^(rank \d+|reference)(?:/\d+)? first loss (\S+) \(step 0\)$", re.M)
LAST = re.compile(r"^(rank \d+|reference)(?:/\d+)? last loss (\S+) \(step \d+\)", re.M)
PARAMS = re.compile(r"^(rank \d+|reference)(?:/\d+)? params sha256=([0-9a-f]{64}) probes=(\S+)$", re.M)
TOLERANCE = 1e-5
_reference: dict[str, dict[str, Any]] = {}  # per suite: its own PyTorch


def _vector(probes: str) -> list[float]:
    return [float(v) for v in probes.split(",")]


def reference(e2e: E2E) -> list[float]:
    """The parameters' probes of one process over the same global batches (once per session and image)."""
    mine = _reference.setdefault(e2e.suite, {})
    if "params" not in mine:
        spec = with_script({"restartPolicy": "Never", "securityContext": REFERENCE_POD_SECURITY, "containers": [{
            "name": "reference", "image": e2e.image, "imagePullPolicy": "Never", "securityContext": REFERENCE_SECURITY,
            "command": ["python3", f"{MOUNT}/train_ddp.py", "--reference", str(RANKS)]}]})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ddp-reference"}, "spec": spec}
        e2e.api.create(PODS.format(ns=e2e.ns), pod)
        wait_for(lambda: (p := e2e.api.pod(e2e.ns, "ddp-reference")) and p["status"].get("phase") in
                 ("Succeeded", "Failed"), 300, "the single-process reference run")
        log = e2e.api.logs(e2e.ns, "ddp-reference")
        found = PARAMS.search(log)
        assert found and found.group(1) == "reference", log
        mine.update(log=log, params=_vector(found.group(3)))
        e2e.report("pytorch_ddp_reference_log", log)
    params: list[float] = mine["params"]
    return params


def assert_trained(e2e: E2E, job: str, log: str) -> None:
    """Every rank: forwarded presets, loss fell >= 10x, identical parameters equal to the reference's."""
    identities = IDENTITY.findall(log)
    assert sorted(int(i[0]) for i in identities) == list(range(RANKS)), log
    master = f"{job}-worker-0.{job}.{e2e.ns}.svc"
    for _rank, size, _local, local_size, _host, addr, port, world in identities:
        assert (size, local_size, addr, port, world) == (str(RANKS), "2", master, "29500", str(RANKS)), log
    assert len({i[4] for i in identities}) == 2, log  # two worker pods
    first = {who: float(v) for who, v in FIRST.findall(log)}
    last = {who: float(v) for who, v in LAST.findall(log)}
    ranks = {f"rank {r}" for r in range(RANKS)}
    assert set(first) == set(last) == ranks, log
    for who in ranks:
        assert first[who] >= 10 * last[who], f"{who}: loss {first[who]} -> {last[who]}\n{log}"
    params = {who: (digest, probes) for who, digest, probes in PARAMS.findall(log)}
    assert set(params) == ranks, log
    assert len({digest for digest, _ in params.values()}) == 1, f"ranks' parameters differ:\n{log}"
    expected = reference(e2e)
    worst = 0.0
    for _, probes in params.values():
        mine = _vector(probes)
        assert len(mine) == len(expected) == 8, log
        worst = max(worst, *(abs(a - b) for a, b in zip(mine, expected, strict=True)))
    assert worst <= TOLERANCE, f"DDP vs single process: max |difference| {worst} > {TOLERANCE}"
    REPORT.setdefault("pytorch_ddp_max_difference", {})[f"{job} [{e2e.suite}]"] = worst
