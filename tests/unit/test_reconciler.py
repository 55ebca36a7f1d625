"""Reconciler: the order of a pass's writes and what it does with each error answer, table-driven against
testkit's RecordingClient (the real KubeClient, its transport answering from the table; as kueue's
TestReconciler). What the apiserver itself does is the integration tests'."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from mpiop.api.raw import JSON
from mpiop.controller.caches import Caches
from mpiop.controller.events import EventRecorder
from mpiop.controller.reconciler import Reconciler
from mpiop.desired import launcher_rbac, objects
from mpiop.kube.client import ApiError
from mpiop.names import GPU_LAYOUT_ANNOTATION, LAUNCH_ANNOTATION
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.nodes import gpu_nodes
from testkit.pods import make_pod
from testkit.recording import Fault, RecordingClient

STATUS = "PATCH mpijobs/pi/status"
SUPPORTING = ["POST secrets pi-ssh", "POST services pi", "POST configmaps pi-config"]
WORKERS = ["POST pods pi-worker-0", "POST pods pi-worker-1"]
LAUNCHER = ["POST pods pi-launcher"]
NEW_JOB = [[STATUS], SUPPORTING, WORKERS, LAUNCHER]
Steps = list[list[str]]


def new_job() -> MPIJobBuilder:
    return make_mpijob("pi", "ns").resource_version("7")


def running_job() -> MPIJobBuilder:
    return new_job().backoff_limit(3).condition("Created").condition("Running").status(start_time=at(0))


def reconciler(job: MPIJobBuilder, client: RecordingClient, pods: list[JSON] | None = None) -> Reconciler:
    """A reconciler whose caches hold `job` (and, given `pods`, its Secret, Service, ConfigMap and pods)."""
    caches = Caches.build(client, "ns")
    caches.mpijobs.observe_write(job.json())
    if pods is not None:
        obj = job.obj()
        for owned in (objects.ssh_secret(obj, b"private", b"public"), objects.service(obj),
                      objects.config_map(obj, [0, 1])):
            caches.informer_for(owned["kind"]).observe_write(owned)
        for pod in pods:
            caches.pods.observe_write(pod)
    return Reconciler(client, caches, EventRecorder(RecordingClient()), clock=lambda: at(60))


def in_steps(writes: list[str], steps: Steps) -> Steps:
    """`writes` cut into the sizes of `steps`, each step sorted: the writes of one step go out together, so
    only the order of the steps is the reconciler's."""
    cut, start = [], 0
    for step in steps:
        cut.append(sorted(writes[start:start + len(step)]))
        start += len(step)
    return cut + ([writes[start:]] if writes[start:] else [])


Outcome = float | int | type[Exception] | None


async def ends_as(pass_: Coroutine[Any, Any, float | None], outcome: Outcome) -> None:
    """A pass returns `outcome` (seconds until the next, None) or raises it (an exception type, or an HTTP status
    of the ApiError)."""
    if isinstance(outcome, int) and not isinstance(outcome, bool) and outcome >= 400:
        with pytest.raises(ApiError) as error:
            await pass_
        assert error.value.status == outcome
    elif isinstance(outcome, type):
        with pytest.raises(outcome):
            await pass_
    else:
        assert await pass_ == outcome


async def test_a_new_jobs_writes_go_status_supporting_objects_workers_then_launcher() -> None:
    """Fails if the order changes: status first, then Secret, Service and ConfigMap, then the workers, then
    the launcher, each step only once the one before succeeded whole."""
    client = RecordingClient(patched=[new_job().json()])
    assert await reconciler(new_job(), client).reconcile("ns/pi") is None
    assert client.writes() == [STATUS, *SUPPORTING, *WORKERS, *LAUNCHER]


@pytest.mark.parametrize(
    ("faults", "steps", "outcome"),
    [
        ([], NEW_JOB, None),
        # The job was deleted since the cache saw it: nothing of it is made.
        ([Fault("PATCH", "/status$", 404, "NotFound")], [[STATUS]], None),
        # A newer job than the cache's: raised, retried with backoff on the newer one; nothing made meanwhile.
        ([Fault("PATCH", "/status$", 409, "Conflict")], [[STATUS]], 409),
        ([Fault("PATCH", "/status$", timeout=True)], [[STATUS]], TimeoutError),
        # A Secret of that name that is not the job's (the claim's test fails): no pod starts; decide again at
        # once to report it.
        ([Fault("POST", "/secrets$", 409, "AlreadyExists"), Fault("PATCH", "/secrets/pi-ssh$", 422, "Invalid")],
         [[STATUS], SUPPORTING, ["PATCH secrets/pi-ssh"]], 0.0),
        ([Fault("POST", "/configmaps$", 403, "Forbidden")], [[STATUS], SUPPORTING], 0.0),
        ([Fault("POST", "/services$", timeout=True)], [[STATUS], SUPPORTING], TimeoutError),
        # A refused worker: the launcher is not created (mpirun would wait for it).
        ([Fault("POST", "/pods$", 422, "Invalid", times=1)], [[STATUS], SUPPORTING, WORKERS], 0.0),
        ([Fault("POST", "/pods$", 500, "InternalError", times=1)], [[STATUS], SUPPORTING, WORKERS], 500),
        ([Fault("POST", "/pods$", timeout=True, times=1)], [[STATUS], SUPPORTING, WORKERS], TimeoutError),
    ],
    ids=["all-made", "status-404-gone", "status-409-conflict", "status-timeout", "secret-409-taken",
         "configmap-403", "service-timeout", "worker-422", "worker-500", "worker-timeout"],
)
async def test_a_new_jobs_pass(faults: list[Fault], steps: Steps,
                               outcome: Outcome) -> None:
    """Each row: the faults of the table, the writes step by step, and what the pass returns (seconds until the
    next, None) or raises (an exception type, or an HTTP status of the ApiError)."""
    client = RecordingClient(faults, patched=[new_job().json()])
    pass_ = reconciler(new_job(), client).reconcile("ns/pi")
    await ends_as(pass_, outcome)
    assert in_steps(client.writes(), steps) == [sorted(step) for step in steps]


def failed_attempt() -> list[JSON]:
    job = running_job().obj()
    return [make_pod(job, "launcher").running().obj(), make_pod(job, "worker", 0).running().obj(),
            make_pod(job, "worker", 1).failed(exit_code=1).obj()]


EVIDENCE = ["POST configmaps pi-attempt-0"]
DELETES = ["DELETE pods/pi-launcher", "DELETE pods/pi-worker-0", "DELETE pods/pi-worker-1"]


@pytest.mark.parametrize(
    ("faults", "steps"),
    [
        ([], [EVIDENCE, [STATUS], ["PATCH configmaps/pi-config"], ["DELETE pods"], DELETES]),
        # A role without deletecollection: the pods go one request each.
        ([Fault("DELETE", "/pods$", 403, "Forbidden")],
         [EVIDENCE, [STATUS], ["PATCH configmaps/pi-config"], ["DELETE pods"], DELETES]),
        # Pods already gone, or replaced (the uid precondition): the restart goes on.
        ([Fault("DELETE", "/pods/pi-worker-0$", 404, "NotFound"),
          Fault("DELETE", "/pods/pi-launcher$", 409, "Conflict")],
         [EVIDENCE, [STATUS], ["PATCH configmaps/pi-config"], ["DELETE pods"], DELETES]),
    ],
    ids=["restart", "deletecollection-403", "delete-404-409"],
)
async def test_a_failed_attempts_logs_are_saved_before_the_status_names_them_and_its_pods_go(
        faults: list[Fault], steps: Steps) -> None:
    client = RecordingClient(faults, patched=[running_job().json()])
    assert await reconciler(running_job(), client, failed_attempt()).reconcile("ns/pi") is None
    assert in_steps(client.writes(), steps) == [sorted(step) for step in steps]
    status = next(r.body for r in client.requests if r.write == STATUS)
    assert status["status"]["restartCount"] == 1


async def test_a_failed_status_write_deletes_no_pod() -> None:
    """The restart is written before its pods go: if the status write fails, they stay for the retry."""
    client = RecordingClient([Fault("PATCH", "/status$", 409, "Conflict")], patched=[running_job().json()])
    with pytest.raises(ApiError):
        await reconciler(running_job(), client, failed_attempt()).reconcile("ns/pi")
    assert client.writes() == [*EVIDENCE, STATUS]


def exec_job(workers: int = 3) -> MPIJobBuilder:
    """A running exec-launched job of `workers` workers."""
    return running_job().annotation(LAUNCH_ANNOTATION, "exec").workers(workers)


def exec_reconciler(job: MPIJobBuilder, client: RecordingClient, named: list[str], pods: list[JSON]) -> Reconciler:
    """A reconciler whose caches hold `job`'s launcher access (its Role naming `named`), Service and `pods`."""
    caches = Caches.build(client, "ns")
    caches.mpijobs.observe_write(job.json())
    obj = job.obj()
    for owned in (launcher_rbac.service_account(obj), launcher_rbac.role(obj, named),
                  launcher_rbac.role_binding(obj), objects.service(obj)):
        caches.informer_for(owned["kind"]).observe_write(owned)
    for pod in pods:
        caches.pods.observe_write(pod)
    return Reconciler(client, caches, EventRecorder(RecordingClient()), clock=lambda: at(60))


ROLE = "PATCH roles/pi-uidpi-launcher"


def two_of_three_workers() -> tuple[MPIJobBuilder, list[JSON]]:
    """Worker.replicas grew from 2 to 3: the Role is to name the two that exist, and pi-worker-2 is to be made."""
    job = exec_job(workers=3)
    return job, [make_pod(job, "worker", i).obj() for i in range(2)]


async def test_the_role_is_patched_before_the_pass_creates_pods() -> None:
    """Fails if a pod is created before the pass's updates: what the new pods depend on (the Role, the hostfile)
    is written first."""
    job, pods = two_of_three_workers()
    client = RecordingClient(patched=[job.json()])
    await exec_reconciler(job, client, [], pods).reconcile("ns/pi")
    writes = client.writes()
    assert ROLE in writes and "POST pods pi-worker-2" in writes, writes
    assert writes.index(ROLE) < writes.index("POST pods pi-worker-2"), writes


async def test_a_failed_role_patch_creates_no_pod() -> None:
    """The pods wait for the pass's updates: a pass whose Role patch fails is retried whole, and made no pod
    meanwhile."""
    job, pods = two_of_three_workers()
    client = RecordingClient([Fault("PATCH", "/roles/pi-uidpi-launcher$", 500, "InternalError")], patched=[job.json()])
    with pytest.raises(ApiError):
        await exec_reconciler(job, client, [], pods).reconcile("ns/pi")
    assert not [w for w in client.writes() if w.startswith("POST pods")], client.writes()


JOB_PATCH = "PATCH mpijobs/pi"


def total_gpu_job() -> MPIJobBuilder:
    """A job stating its total GPUs (spec.gpus): the controller lays it out (Plan.mpijob_patch)."""
    return new_job().total_gpus(16)


def laying_out(client: RecordingClient) -> Reconciler:
    """A reconciler whose caches hold the total-GPU job and two 8-GPU nodes, listed."""
    made = reconciler(total_gpu_job(), client)
    assert made.caches.nodes is not None
    for node in gpu_nodes("n", 2, 8):
        made.caches.nodes.observe_write(node)
    made.caches.nodes.synced.set()
    return made


@pytest.mark.parametrize(
    ("faults", "steps", "outcome"),
    [
        # The layout is written into the job before anything else of it is made, and only over the version this
        # pass decided on; then decide again at once, on the laid-out job.
        ([], [[STATUS], [JOB_PATCH]], 0.0),
        # The job changed since the cache's version (the patch's resourceVersion): raised, retried with backoff
        # on the newer one; nothing of the job made meanwhile.
        ([Fault("PATCH", "/mpijobs/pi$", 409, "Conflict")], [[STATUS], [JOB_PATCH]], 409),
        # Deleted since the status was written: nothing of it is made, and no error (as the status's 404).
        ([Fault("PATCH", "/mpijobs/pi$", 404, "NotFound")], [[STATUS], [JOB_PATCH]], None),
        ([Fault("PATCH", "/mpijobs/pi$", timeout=True)], [[STATUS], [JOB_PATCH]], TimeoutError),
    ],
    ids=["laid-out-first", "job-patch-409-conflict", "job-patch-404-gone", "job-patch-timeout"],
)
async def test_a_total_gpu_jobs_layout_is_written_before_anything_else_of_it(
        faults: list[Fault], steps: Steps, outcome: Outcome) -> None:
    client = RecordingClient(faults, patched=[total_gpu_job().json()])
    pass_ = laying_out(client).reconcile("ns/pi")
    await ends_as(pass_, outcome)
    assert in_steps(client.writes(), steps) == [sorted(step) for step in steps]
    # Each write over the version before it: the status over the cache's, the layout over the one the status's
    # write answered (the RecordingClient's first, 1000).
    status = next(r.body for r in client.requests if r.write == STATUS)
    patch = next(r.body for r in client.requests if r.write == JOB_PATCH)
    assert (status["metadata"]["resourceVersion"], patch["metadata"]["resourceVersion"]) == ("7", "1000")
    assert patch["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    assert GPU_LAYOUT_ANNOTATION in patch["metadata"]["annotations"]


async def test_an_object_gone_before_its_update_is_made_again_by_the_next_pass_not_an_error() -> None:
    """A job's ConfigMap or Role deleted since the cache saw it (the garbage collector, as the job goes): its patch's
    404 is no reconcile error; no pod of the pass is made without it, and the job is decided again at once."""
    job, pods = two_of_three_workers()
    client = RecordingClient([Fault("PATCH", "/roles/pi-uidpi-launcher$", 404, "NotFound")], patched=[job.json()])
    assert await exec_reconciler(job, client, [], pods).reconcile("ns/pi") == 0.0
    assert ROLE in client.writes()
    assert not [w for w in client.writes() if w.startswith("POST pods")], client.writes()
