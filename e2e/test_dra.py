"""GPUs through DRA on the real node: a real DRA driver's kubelet plugin (devcluster/draplugin.py, fake devices)
registered with the kubelet, 4 devices in the node's ResourceSlice; a job's workers each claim 2 of them through a
ResourceClaimTemplate, and nothing else says their size: mpiop counts the claimed devices of the class it is told
is a GPU class (--gpu-device-classes) as each worker's slots, the scheduler allocates the claims, the kubelet has
the plugin prepare them before it starts the workers, and Open MPI's pi runs on as many ranks as the hostfile's
slots (mpirun is given no -n)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from mpiop.kube.client import RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from testkit.dra import allocated_devices, claim_template, exactly, request
from testkit.e2e.dra import DRIVER, FakeDriver, claimed_gpus_pi_job, fake_dra_driver
from testkit.e2e.kube import MPIJOBS, wait_for
from testkit.e2e.mpi import PI_LINE, RANK_LINE, assert_pi, assert_succeeded
from testkit.e2e.session import E2E, operator_process

# Node-wide: a DRA driver's kubelet plugin, its node's ResourceSlice and a cluster-scoped DeviceClass.
pytestmark = pytest.mark.node_wide

COUNT = 2  # devices each worker claims
WORKERS = 2


@pytest.fixture
def driver(bare: E2E) -> Iterator[FakeDriver]:
    """The fake DRA driver on the node and mpiop (watching `bare`'s namespace) counting its class as GPUs."""
    assert bare.node.workdir is not None
    with (fake_dra_driver(bare.api, bare.node.kubeconfig, bare.node.workdir / "logs", bare.ns) as found,
          operator_process(bare, "--gpu-device-classes", DRIVER)):
        yield found


def test_openmpi_pi_ranks_per_worker_are_its_claimed_devices(bare: E2E, driver: FakeDriver) -> None:
    e2e = bare
    e2e.api.create(RESOURCE_CLAIM_TEMPLATES.path(e2e.ns),
                   claim_template("two-gpus", request("gpus", exactly(DRIVER, COUNT)), namespace=e2e.ns))
    started = e2e.create_job(claimed_gpus_pi_job("dra", e2e.image, "two-gpus"))
    job = e2e.wait_finished("dra")
    e2e.record("dra-claimed-gpus-pi", time.monotonic() - started)
    assert_succeeded(job)

    hostfile = e2e.api.get(f"/api/v1/namespaces/{e2e.ns}/configmaps/dra-config")["data"]["hostfile"]
    lines = hostfile.splitlines()
    assert [line.split()[-1] for line in lines] == [f"slots={COUNT}"] * WORKERS, hostfile
    log = e2e.launcher_log("dra")
    assert_pi(log, "dra", ranks=WORKERS * COUNT, hosts=WORKERS)
    ranks_per_worker = Counter(host for _, host in RANK_LINE.findall(log))
    assert ranks_per_worker == {f"dra-worker-{i}": COUNT for i in range(WORKERS)}, log  # each its claimed devices

    # cleanPodPolicy None: the workers stay Running with their claims, allocated, reserved for them and prepared.
    claims = {c["metadata"]["name"]: c for c in e2e.api.get(RESOURCE_CLAIMS.path(e2e.ns))["items"]}
    prepared = driver.prepared()
    seen: list[str] = []
    report = []
    for i in range(WORKERS):
        pod = e2e.api.pod(e2e.ns, f"dra-worker-{i}")
        assert pod is not None and pod["status"]["phase"] == "Running", pod
        [status] = pod["status"]["resourceClaimStatuses"]
        claim = claims[status["resourceClaimName"]]
        devices = allocated_devices(claim)
        assert len(devices) == COUNT and all(d.startswith(f"{DRIVER}/mpiop-e2e/gpu-") for d in devices), claim
        reserved = claim["status"].get("reservedFor") or []
        assert [(r["resource"], r["name"], r["uid"]) for r in reserved] == [
            ("pods", pod["metadata"]["name"], pod["metadata"]["uid"])], claim
        record = prepared[claim["metadata"]["uid"]]  # the kubelet had the plugin prepare it
        assert sorted(record["devices"]) == sorted(d.split("/", 1)[1] for d in devices), (record, driver.log())
        seen.extend(devices)
        report.append(f"{pod['metadata']['name']}: claim {claim['metadata']['name']} allocated {', '.join(devices)};"
                      f" reserved for the pod; prepared by the plugin: {', '.join(record['devices'])}")
    assert len(set(seen)) == WORKERS * COUNT, seen  # each its own devices
    match = PI_LINE.search(log)
    report += ["hostfile:", *lines, "pi: " + (match.group(0) if match else "")]
    print("\n" + "\n".join(report))
    e2e.report("dra_claimed_gpus_log", "\n".join(report))
    e2e.report("dra_claimed_gpus_launcher_log", log)

    # The job gone, its workers and their claims go: the kubelet has the plugin unprepare each claim.
    e2e.api.delete(f"{MPIJOBS.format(ns=e2e.ns)}/dra")
    wait_for(lambda: not driver.prepared(), 120, "the kubelet to have the plugin unprepare the claims",
             describe=driver.log)
    assert "NodeUnprepareResources" in driver.log()
