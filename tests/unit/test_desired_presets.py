"""mpiop.desired.presets and their forwarding (env.framework_env): per implementation, the user's list."""

from __future__ import annotations

import pytest

from mpiop.desired.env import forward_env_errors, forwarded_names, framework_env
from mpiop.desired.presets import DEFAULT_MASTER_PORT, PRESET_NAMES, first_host, presets, world_size
from mpiop.names import FORWARD_ENV_ANNOTATION
from testkit.mpijobs import MPIJobBuilder, make_mpijob

PRESETS_LIST = "MASTER_ADDR;MASTER_PORT;WORLD_SIZE;NPROC_PER_NODE;LOCAL_WORLD_SIZE"


def as_dict(env: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env}


@pytest.mark.parametrize(
    ("job", "domain", "expected"),
    [
        (make_mpijob("pi"), "", {
            "MASTER_ADDR": "pi-worker-0.pi.default.svc", "MASTER_PORT": "29500", "WORLD_SIZE": "2",
            "NPROC_PER_NODE": "1", "LOCAL_WORLD_SIZE": "1"}),
        (make_mpijob("t", "ml").workers(3).slots(4), "cluster.local", {
            "MASTER_ADDR": "t-worker-0.t.ml.svc.cluster.local", "MASTER_PORT": "29500", "WORLD_SIZE": "12",
            "NPROC_PER_NODE": "4", "LOCAL_WORLD_SIZE": "4"}),
        (make_mpijob("g").workers(2).gpus(8), "", {
            "MASTER_ADDR": "g-worker-0.g.default.svc", "MASTER_PORT": "29500", "WORLD_SIZE": "16",
            "NPROC_PER_NODE": "8", "LOCAL_WORLD_SIZE": "8"}),
        (make_mpijob("l").workers(2).slots(2).launcher_as_worker(), "", {
            "MASTER_ADDR": "l-launcher.l.default.svc", "MASTER_PORT": "29500", "WORLD_SIZE": "6",
            "NPROC_PER_NODE": "2", "LOCAL_WORLD_SIZE": "2"}),
    ],
    ids=["defaults", "slots-and-cluster-domain", "gpus-are-slots", "launcher-as-worker-is-first-host"],
)
def test_presets(job: MPIJobBuilder, domain: str, expected: dict[str, str]) -> None:
    env = presets(job.obj(), domain)
    assert [e["name"] for e in env] == list(PRESET_NAMES)
    assert as_dict(env) == expected


def test_first_host_is_the_hostfile_first_line() -> None:
    """The same pod; Open MPI's hostfile names a working launcher by its hostname, MASTER_ADDR by its DNS name."""
    from mpiop.desired.hostfile import hostfile
    for builder, hostname_only in ((make_mpijob("a").workers(3), False), (make_mpijob("b").launcher_as_worker(), True),
                                   (make_mpijob("c").launcher_as_worker().implementation("MPICH"), False)):
        job = builder.obj()
        first = hostfile(job, "c.org").split()[0].split(":")[0]
        assert first == (first_host(job, "c.org").split(".")[0] if hostname_only else first_host(job, "c.org"))
        assert world_size(job) == sum(1 for _ in hostfile(job).splitlines())


def test_master_port_seam() -> None:
    """Host networking passes the port allocated to the job; the default is torch's."""
    assert DEFAULT_MASTER_PORT == 29500
    assert as_dict(presets(make_mpijob("p").obj(), master_port=31001))["MASTER_PORT"] == "31001"
    assert as_dict(framework_env(make_mpijob("p").obj(), master_port=31001))["MASTER_PORT"] == "31001"


@pytest.mark.parametrize(
    ("job", "forwarding"),
    [
        (make_mpijob("j"), {"OMPI_MCA_mca_base_env_list": PRESETS_LIST}),
        (make_mpijob("j").implementation("Intel"), {"I_MPI_HYDRA_ENV": "all"}),
        (make_mpijob("j").implementation("MPICH"), {"HYDRA_ENV": "all"}),
        (make_mpijob("j").command("Launcher", "mpirun", "-x", "NCCL_DEBUG=INFO", "python3", "t.py"), {}),
        (make_mpijob("j").command("Launcher", "sh", "-c", "mpirun -x LD_LIBRARY_PATH -n 4 t"), {}),
        (make_mpijob("j").command("Launcher", "mpirun", "-n", "4", "python3", "t.py", "-xlarge"),
         {"OMPI_MCA_mca_base_env_list": PRESETS_LIST}),
    ],
    ids=["openmpi-list", "intel-hydra-all", "mpich-hydra-all", "openmpi-dash-x-left-alone",
         "openmpi-dash-x-in-shell", "openmpi-not-dash-x"],
)
def test_forwarding_per_implementation(job: MPIJobBuilder, forwarding: dict[str, str]) -> None:
    """Open MPI 4 and 5 read the `;` list; Hydra is told to pass everything. Open MPI 4 refuses the list
    together with `-x` on the command line, so a command that forwards with -x keeps doing it alone."""
    env = as_dict(framework_env(job.obj()))
    assert {k: v for k, v in env.items() if k not in PRESET_NAMES} == forwarding


@pytest.mark.parametrize(
    ("annotation", "launcher_env", "expected"),
    [
        ("NCCL_*,FOO", ["NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "OTHER"],
         [*PRESET_NAMES, "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "FOO"]),
        (" FOO  BAR,,FOO ", [], [*PRESET_NAMES, "FOO", "BAR"]),
        ("NCCL_*", [], list(PRESET_NAMES)),
        ("MASTER_PORT,LD_LIBRARY_PATH", [], [*PRESET_NAMES, "LD_LIBRARY_PATH"]),
        ("*", ["A", "B"], [*PRESET_NAMES, "A", "B"]),
    ],
    ids=["pattern-expands-to-launcher-env", "separators-and-duplicates", "pattern-matching-nothing",
         "preset-listed-again", "everything-declared"],
)
def test_user_forward_list(annotation: str, launcher_env: list[str], expected: list[str]) -> None:
    builder = make_mpijob("j").annotation(FORWARD_ENV_ANNOTATION, annotation)
    for name in launcher_env:
        builder.env("Launcher", name, "x")
    job = builder.obj()
    assert forwarded_names(job) == expected
    assert as_dict(framework_env(job))["OMPI_MCA_mca_base_env_list"] == ";".join(expected)
    assert forward_env_errors(job) == []


def test_user_forward_list_errors_name_the_entries() -> None:
    job = make_mpijob("j").annotation(FORWARD_ENV_ANNOTATION, "GOOD,BAD=1,NO*PE,9X").obj()
    assert forward_env_errors(job) == ["BAD=1", "NO*PE", "9X"]
    assert forwarded_names(job) == [*PRESET_NAMES, "GOOD"]


def test_user_env_wins_over_the_list() -> None:
    """A launcher that sets OMPI_MCA_mca_base_env_list itself keeps its own (merge_env: the user wins)."""
    from mpiop.desired.pods import launcher_pod
    job = make_mpijob("j").env("Launcher", "OMPI_MCA_mca_base_env_list", "MINE").obj()
    env = launcher_pod(job, 0)["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "OMPI_MCA_mca_base_env_list"] == [
        {"name": "OMPI_MCA_mca_base_env_list", "value": "MINE"}]
