"""mpiop.policies.gpu_slots through decide: a worker whose GPUs come through DRA claims gets its slots from its
ResourceClaimTemplates in everything that reads slots (hostfile, presets, the launcher's environment, failure
ranks), waits while a template is not seen, fails naming spec.slotsPerWorker when only it can say, and keeps its
hostfile's slots once the hostfile is written if the template goes or can no longer be counted."""

from __future__ import annotations

import pytest

from mpiop import names
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.decide import decide
from mpiop.desired.settings import DEFAULT_SETTINGS, Settings
from mpiop.plan import Observed, Plan
from mpiop.policies.gpu_slots import FOUND, WAITING
from mpiop.status import conditions as c
from testkit.dra import claim_template, exactly, request
from testkit.mpijobs import MPIJobBuilder, at, make_mpijob
from testkit.pods import env_of, make_pod, observe

EIGHT = claim_template("eight-gpus", request("gpus", exactly("gpu.nvidia.com", 8)))
ALL = claim_template("eight-gpus", request("gpus", exactly("gpu.nvidia.com", all_devices=True)))


def dra_job(workers: int = 2) -> MPIJobBuilder:
    return make_mpijob("pi", "ns").workers(workers).claim("gpus", "eight-gpus")


def decided(job: MPIJob, templates: dict[str, JSON] | None, observed: Observed | None = None,
            settings: Settings = DEFAULT_SETTINGS) -> Plan:
    observed = observed or Observed()
    observed.claim_templates = templates
    return decide(job, observed, at(0), settings)


def made(plan: Plan, kind: str) -> list[JSON]:
    steps = plan.creation_steps
    return [o for o in steps.supporting + steps.workers + steps.launcher if o["kind"] == kind]


def test_a_dra_worker_of_8_devices_has_8_slots_everywhere_slots_are_read() -> None:
    plan = decided(dra_job().obj(), {"eight-gpus": EIGHT})
    [config] = made(plan, "ConfigMap")
    print("\nhostfile:\n" + config["data"][names.HOSTFILE_NAME])
    assert config["data"][names.HOSTFILE_NAME] == "pi-worker-0.pi.ns.svc slots=8\npi-worker-1.pi.ns.svc slots=8\n"
    workers = made(plan, "Pod")
    assert {env_of(w)["LOCAL_WORLD_SIZE"] for w in workers} == {"8"}
    assert {env_of(w)["WORLD_SIZE"] for w in workers} == {"16"}
    assert plan.status.condition("Running") is None


def test_the_launcher_is_told_the_slots_too() -> None:
    plan = decided(dra_job().obj(), {"eight-gpus": EIGHT})
    [launcher] = [p for p in made(plan, "Pod") if p["metadata"]["name"] == "pi-launcher"]
    assert env_of(launcher)["OMPI_MCA_orte_set_default_slots"] == "8"
    assert env_of(launcher)["LOCAL_WORLD_SIZE"] == "8"


def test_a_template_not_seen_yet_holds_everything_back_and_is_said_once() -> None:
    job = dra_job().obj()
    plan = decided(job, {})
    assert not made(plan, "ConfigMap") and not made(plan, "Pod") and not plan.create_ssh_secret
    running = plan.status.condition("Running")
    assert running is not None and (running.status, running.reason) == ("False", WAITING)
    assert running.message == ("MPIJob ns/pi waits: ResourceClaimTemplate eight-gpus of claim gpus in the Worker "
                               "template: not found")
    assert [(e.type, e.reason) for e in plan.events if e.type == "Warning"] == [("Warning", WAITING)]
    again = decided(job.model_copy(update={"status": plan.status}), {})
    assert not again.events, "the same wait is told once"


def test_once_the_template_is_seen_the_job_goes_on_and_says_so() -> None:
    job = dra_job().obj()
    waiting = decided(job, {}).status
    plan = decided(job.model_copy(update={"status": waiting}), {"eight-gpus": EIGHT})
    running = plan.status.condition("Running")
    assert running is not None and (running.status, running.reason) == ("False", FOUND)
    assert running.message == "MPIJob ns/pi: 8 slots per worker, from its claims"
    assert "slots=8" in made(plan, "ConfigMap")[0]["data"][names.HOSTFILE_NAME]


def test_all_devices_without_slots_per_worker_fails_naming_the_field() -> None:
    plan = decided(dra_job().obj(), {"eight-gpus": ALL})
    failed = plan.status.condition("Failed")
    assert failed is not None and (failed.status, failed.reason) == ("True", c.VALIDATION_ERROR_REASON)
    assert failed.message == (
        "MPIJob ns/pi has failed: spec.slotsPerWorker: must be set: claim gpus in the Worker template "
        "(ResourceClaimTemplate eight-gpus, request gpus) asks for All devices of class gpu.nvidia.com, a count "
        "known only once allocated")
    assert [(e.type, e.reason) for e in plan.events if e.type == "Warning"] == [("Warning", c.VALIDATION_ERROR_REASON)]
    assert not made(plan, "ConfigMap") and not made(plan, "Pod")


def test_all_devices_with_slots_per_worker_run_with_them() -> None:
    plan = decided(dra_job().slots(8).obj(), {"eight-gpus": ALL})
    assert "slots=8" in made(plan, "ConfigMap")[0]["data"][names.HOSTFILE_NAME]


@pytest.mark.parametrize("templates", [{}, {"eight-gpus": ALL}, None],
                         ids=["template-deleted", "template-changed-to-all", "templates-no-longer-watched"])
def test_a_job_whose_hostfile_is_written_keeps_its_slots(templates: dict[str, JSON] | None) -> None:
    job = dra_job().obj()
    first = decided(job, {"eight-gpus": EIGHT})
    pods = [make_pod(job, "worker", i).running().obj() for i in range(2)]
    observed = Observed(pods=pods, config_map=made(first, "ConfigMap")[0])
    plan = decided(job.model_copy(update={"status": first.status}), templates, observed)
    assert plan.status.condition("Failed") is None
    hostfiles = {o["data"][names.HOSTFILE_NAME] for o in plan.objects_to_update if o["kind"] == "ConfigMap"}
    assert hostfiles <= {made(first, "ConfigMap")[0]["data"][names.HOSTFILE_NAME]}, "the hostfile keeps its slots"
    assert {env_of(w)["LOCAL_WORLD_SIZE"] for w in made(plan, "Pod")} == {"8"}


def test_a_template_changed_to_another_count_changes_the_slots() -> None:
    job = dra_job().obj()
    first = decided(job, {"eight-gpus": EIGHT})
    four = claim_template("eight-gpus", request("gpus", exactly("gpu.nvidia.com", 4)))
    plan = decided(job.model_copy(update={"status": first.status}), {"eight-gpus": four},
                   Observed(config_map=made(first, "ConfigMap")[0]))
    [config] = [o for o in plan.objects_to_update if o["kind"] == "ConfigMap"]
    assert config["data"][names.HOSTFILE_NAME].count("slots=4") == 2


def test_a_failed_workers_ranks_are_counted_in_the_claims_slots() -> None:
    job = dra_job().obj()
    pods = [make_pod(job, "launcher").running().obj(), make_pod(job, "worker", 0).running().obj(),
            make_pod(job, "worker", 1).on_node("n2").failed(reason="Error", exit_code=1).obj()]
    plan = decided(job, {"eight-gpus": EIGHT}, observe(job, pods))
    assert plan.status.last_failure is not None and plan.status.last_failure.ranks == "8-15"


def test_without_gpu_device_classes_claims_are_not_read() -> None:
    plan = decided(dra_job().obj(), None, settings=Settings(gpu_device_classes=frozenset()))
    assert made(plan, "ConfigMap")[0]["data"][names.HOSTFILE_NAME].count("slots=1") == 2
    assert plan.status.condition("Running") is None


def test_a_job_without_claims_needs_no_template() -> None:
    plan = decided(make_mpijob("pi", "ns").gpus(4).obj(), None)
    assert made(plan, "ConfigMap")[0]["data"][names.HOSTFILE_NAME].count("slots=4") == 2
