"""Host-network jobs through mpiop.decide: ports on the pods, the SSH config first, a port conflict, a restart."""

from __future__ import annotations

from typing import Any

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.desired import hostnetwork as hn
from mpiop.desired import ssh_config
from mpiop.desired.pods import WORKER_DEFAULT_COMMAND, launcher_pod, worker_pod
from mpiop.policies import host_ports
from testkit.mpijobs import make_mpijob
from testkit.pods import env_of, main_container
from testkit.world import World, names_of, running


def created(plan: Any, name: str) -> JSON:
    pod: JSON = next(o for o in plan.objects_to_create if o["metadata"]["name"] == name)
    return pod


def config_ports(world: World) -> dict[str, int]:
    assert world.config_map is not None
    return ssh_config.read(world.config_map, world.job.status.attempt)


def test_worker_pod_gets_its_port() -> None:
    job = make_mpijob("pi").host_network().obj()
    ports = hn.Ports(0, {"pi-worker-0": 21000, "pi-worker-1": 22000, hn.MASTER: 23000})
    pod = worker_pod(job, 0, 0, ports=ports)
    main = main_container(pod)
    assert main["ports"] == [
        {"name": "mpiop-ssh", "containerPort": 21000, "hostPort": 21000, "protocol": "TCP"},
        {"name": "mpiop-master", "containerPort": 23000, "hostPort": 23000, "protocol": "TCP"},
    ]
    assert main["command"] == [*WORKER_DEFAULT_COMMAND, "-p", "21000"]
    assert env_of(pod)["MPIOP_SSH_PORT"] == "21000"
    assert pod["metadata"]["labels"][names.SSH_PORT_LABEL] == "21000"
    assert pod["metadata"]["labels"][names.MASTER_PORT_LABEL] == "23000"
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    other = worker_pod(job, 1, 0, ports=ports)
    assert [p["name"] for p in main_container(other)["ports"]] == ["mpiop-ssh"], "MASTER_PORT is rank 0's"
    for made in (pod, other, launcher_pod(job, 0, ports=ports)):
        assert env_of(made)["MASTER_PORT"] == "23000", "the framework preset is the allocated port"
    assert env_of(worker_pod(make_mpijob("pi").obj(), 0, 0))["MASTER_PORT"] == "29500", "torch's default"


def test_custom_worker_command_and_user_ports_are_kept() -> None:
    job = (make_mpijob("pi").host_network().command("Worker", "/usr/local/bin/mpi-sshd")
           .container("Worker", ports=[{"name": "metrics", "containerPort": 9100}]).obj())
    pod = worker_pod(job, 1, 0, ports=hn.Ports(0, {"pi-worker-1": 25000}))
    assert main_container(pod)["command"] == ["/usr/local/bin/mpi-sshd"], "the command reads MPIOP_SSH_PORT"
    assert env_of(pod)["MPIOP_SSH_PORT"] == "25000"
    assert [p["name"] for p in main_container(pod)["ports"]] == ["metrics", "mpiop-ssh"]


def test_launcher_mounts_the_ssh_config_and_works_on_its_own_port() -> None:
    job = make_mpijob("pi").host_network().launcher_as_worker().obj()
    ports = host_ports.table(job, 0, [], None)
    pod = launcher_pod(job, 0, ports=ports)
    items = next(v for v in pod["spec"]["volumes"] if v["name"] == "mpi-job-config")["configMap"]["items"]
    assert {"key": "ssh_config", "path": "ssh_config", "mode": 0o444} in items
    assert env_of(pod)["MPIOP_SSH_PORT"] == str(ports.ssh("pi-launcher"))
    assert main_container(pod)["ports"][0]["hostPort"] == ports.ssh("pi-launcher")
    plain = launcher_pod(make_mpijob("pi").obj(), 0)
    items = next(v for v in plain["spec"]["volumes"] if v["name"] == "mpi-job-config")["configMap"]["items"]
    assert [i["key"] for i in items] == ["hostfile", "discover_hosts.sh"]
    assert "ports" not in main_container(plain) and "MPIOP_SSH_PORT" not in env_of(plain)


def test_ports_config_first_conflict_then_restart() -> None:
    world = World(make_mpijob("pi", "ns").host_network().obj())

    plan = world.reconcile(0)
    assert names_of(plan.objects_to_create) == [
        "Service/pi", "ConfigMap/pi-config", "Pod/pi-worker-0", "Pod/pi-worker-1"], (
        "the launcher waits until the ConfigMap with the ports exists")
    ports = config_ports(world)
    for name in ("pi-worker-0", "pi-worker-1"):
        assert env_of(created(plan, name))["MPIOP_SSH_PORT"] == str(ports[name])
    assert len(set(ports.values())) == 3

    plan = world.reconcile(1)
    assert names_of(plan.objects_to_create) == ["Pod/pi-launcher"]
    assert "-F /etc/mpi/ssh_config" in env_of(created(plan, "pi-launcher"))["OMPI_MCA_plm_rsh_args"]

    # worker-1's port is taken on every node: it is made again on the next port of its sequence, and so is the
    # launcher, which mounted the old one (nothing ran yet: worker-1 never started).
    world.set("pi-worker-0", running)
    world.set("pi-worker-1", lambda b: b.unschedulable())
    plan = world.reconcile(2)
    assert names_of(plan.pods_to_delete) == ["pi-worker-1", "pi-launcher"]
    assert plan.pod_grace_seconds == {"pi-worker-1": 1, "pi-launcher": 1}, "no 30 s grace: the launcher ran nothing"
    assert world.job.status.restart_count is None, "not a restart"
    moved = config_ports(world)
    assert moved["pi-worker-0"] == ports["pi-worker-0"] and moved[hn.MASTER] == ports[hn.MASTER]
    assert moved["pi-worker-1"] not in ports.values()
    plan = world.reconcile(3)
    assert plan.objects_to_create == [], "made again only once the old pod is gone"
    world.gone()
    plan = world.reconcile(4)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-1", "Pod/pi-launcher"]
    assert env_of(created(plan, "pi-worker-1"))["MPIOP_SSH_PORT"] == str(moved["pi-worker-1"])
    assert plan.objects_to_update == [], "the ConfigMap already said so"

    # A failed worker restarts the job: the new attempt's pods get new ports, the launcher once the config says so.
    world.set("pi-worker-1", lambda b: b.failed(exit_code=137))
    world.reconcile(5)
    assert world.job.status.restart_count == 1
    world.gone()
    plan = world.reconcile(6)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-0", "Pod/pi-worker-1"]
    assert names_of(plan.objects_to_update) == ["ConfigMap/pi-config"]
    fresh = config_ports(world)
    assert fresh and fresh != moved
    plan = world.reconcile(7)
    assert names_of(plan.objects_to_create) == ["Pod/pi-launcher-1"], "each attempt's launcher has its own name"
    assert podstate.attempt(world.pods["pi-launcher-1"]) == 1


def test_a_working_launcher_keeps_its_port_under_each_attempts_name() -> None:
    """The table is keyed by hostname: `<job>-launcher` for every attempt's launcher pod."""
    world = World(make_mpijob("pi", "ns").host_network().launcher_as_worker().obj())
    world.reconcile(0)
    plan = world.reconcile(1)
    ports = config_ports(world)
    assert env_of(created(plan, "pi-launcher"))["MPIOP_SSH_PORT"] == str(ports["pi-launcher"])
    world.set_all(running)
    plan = world.reconcile(2)
    assert plan.pods_to_delete == [] and config_ports(world) == ports, "the running launcher holds its port"
    world.set("pi-worker-0", lambda b: b.failed(exit_code=137))
    world.reconcile(3)
    world.gone()
    world.reconcile(4)
    plan = world.reconcile(5)
    assert names_of(plan.objects_to_create) == ["Pod/pi-launcher-1"]
    fresh = config_ports(world)
    assert env_of(created(plan, "pi-launcher-1"))["MPIOP_SSH_PORT"] == str(fresh["pi-launcher"])
    assert fresh["pi-launcher"] != ports["pi-launcher"], "the new attempt's port"
    plan = world.reconcile(6)
    assert plan.pods_to_delete == [] and plan.objects_to_create == [] and config_ports(world) == fresh


def test_the_kept_launcher_of_an_old_attempt_does_not_move_the_new_one() -> None:
    """A failed launcher is kept for its log, with its old port label: only current pods can have moved."""
    world = World(make_mpijob("pi", "ns").host_network().launcher_as_worker().obj())
    world.reconcile(0)
    world.reconcile(1)
    world.set_all(running)
    world.set("pi-launcher", lambda b: b.failed(exit_code=137))
    world.reconcile(2)
    world.gone()
    world.reconcile(3)
    world.reconcile(4)
    assert world.live_pods() == {"pi-launcher": 0, "pi-launcher-1": 1, "pi-worker-0": 1, "pi-worker-1": 1}
    plan = world.reconcile(5)
    assert plan.pods_to_delete == [] and plan.objects_to_create == []


def test_a_moved_worker_waits_for_the_old_launcher_to_go() -> None:
    """The unscheduled worker is gone at once, the launcher deleted with it takes its grace period (a shell as PID 1
    ignores SIGTERM): a worker made meanwhile would be reached by the old launcher's mpirun, whose exit 0 then read
    as a lost worker and restarted the job (seen in CI). The worker comes with the new launcher instead."""
    world = World(make_mpijob("pi", "ns").host_network().obj())
    world.reconcile(0)
    world.reconcile(1)
    world.set("pi-worker-0", running)
    world.set("pi-launcher", running)
    world.set("pi-worker-1", lambda b: b.unschedulable())
    plan = world.reconcile(2)
    assert names_of(plan.pods_to_delete) == ["pi-worker-1", "pi-launcher"]
    del world.pods["pi-worker-1"]  # never bound: the apiserver removes it at once
    plan = world.reconcile(3)
    assert plan.objects_to_create == [], "no worker while the old launcher may still run mpirun"
    world.set("pi-launcher", lambda b: b.succeeded())  # whatever it did on its way out decides nothing
    plan = world.reconcile(4)
    assert plan.objects_to_create == [] and world.job.status.restart_count is None
    assert "Succeeded=True" not in world.conditions
    world.gone()
    plan = world.reconcile(5)
    assert names_of(plan.objects_to_create) == ["Pod/pi-worker-1", "Pod/pi-launcher"]
    assert names.REPLACEMENT_LABEL not in created(plan, "pi-worker-1")["metadata"]["labels"]
    world.set_all(running)
    world.set("pi-launcher", lambda b: b.succeeded())
    world.reconcile(6)
    assert "Succeeded=True" in world.conditions and world.job.status.restart_count is None
