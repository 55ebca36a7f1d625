"""mpiop.desired.status_report: what a job's pods get to report their progress, and the opt-outs."""

from __future__ import annotations

import pytest

from mpiop.desired import objects, pods
from mpiop.desired.settings import Settings
from mpiop.desired.status_report import StatusEndpoint
from testkit.mpijobs import MPIJobBuilder, make_mpijob
from testkit.pods import env_of

ENDPOINT = StatusEndpoint("https://mpiop-status.mpiop-system.svc:8443", "-----BEGIN CERTIFICATE-----\nCA\n")
ON = Settings(status_endpoint=ENDPOINT)
URL = "https://mpiop-status.mpiop-system.svc:8443/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/pi/status"
VARIABLES = {"MPIOP_STATUS_URL": URL, "MPIOP_STATUS_TOKEN": "/var/run/secrets/mpiop.kubeflow.org/status/token",
             "MPIOP_STATUS_CA": "/var/run/secrets/mpiop.kubeflow.org/status/ca.crt"}


def job() -> MPIJobBuilder:
    return make_mpijob("pi", "ns").workers(2)


def test_every_pod_and_container_gets_the_token_ca_and_variables() -> None:
    built = job().container("Worker", name="main").obj()
    built.spec.mpi_replica_specs["Worker"].template["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    for pod in (pods.worker_pod(built, 0, 0, settings=ON), pods.launcher_pod(built, 0, settings=ON)):
        spec = pod["spec"]
        volume = next(v for v in spec["volumes"] if v["name"] == "mpiop-status")
        assert volume["projected"]["sources"] == [
            {"serviceAccountToken": {"audience": "mpiop.kubeflow.org", "expirationSeconds": 3600, "path": "token"}},
            {"configMap": {"name": "pi-config", "items": [{"key": "mpiop-status-ca.crt", "path": "ca.crt"}]}}]
        for container in spec["containers"]:
            env = env_of(container)
            assert {k: env.get(k) for k in VARIABLES} == VARIABLES, container["name"]
            assert {"name": "mpiop-status", "mountPath": "/var/run/secrets/mpiop.kubeflow.org/status",
                    "readOnly": True} in container["volumeMounts"]


def test_the_launcher_forwards_the_variables_to_the_ranks() -> None:
    launcher = pods.launcher_pod(job().obj(), 0, settings=ON)
    env = env_of(launcher)
    assert {"MPIOP_STATUS_URL", "MPIOP_STATUS_TOKEN", "MPIOP_STATUS_CA"} <= set(
        str(env["OMPI_MCA_mca_base_env_list"]).split(";"))


def test_the_ca_is_in_the_jobs_config_map() -> None:
    data = objects.config_map(job().obj(), [], status_endpoint=ENDPOINT)["data"]
    assert data["mpiop-status-ca.crt"] == ENDPOINT.ca_pem


def test_a_users_own_variable_wins() -> None:
    built = job().env("Worker", "MPIOP_STATUS_URL", "https://elsewhere").obj()
    env = env_of(pods.worker_pod(built, 0, 0, settings=ON))
    assert env["MPIOP_STATUS_URL"] == "https://elsewhere"


@pytest.mark.parametrize(("builder", "settings"), [
    (job().annotation("mpiop.kubeflow.org/report-progress", "false"), ON),
    (job(), Settings()),
], ids=["job-opted-out", "endpoint-off"])
def test_off_leaves_pods_and_config_map_as_they_were(builder: MPIJobBuilder, settings: Settings) -> None:
    built = builder.obj()
    for pod in (pods.worker_pod(built, 0, 0, settings=settings), pods.launcher_pod(built, 0, settings=settings)):
        assert not any(v["name"] == "mpiop-status" for v in pod["spec"].get("volumes", []))
        assert not any(e["name"].startswith("MPIOP_STATUS") for e in pod["spec"]["containers"][0]["env"])
    launcher = pods.launcher_pod(built, 0, settings=settings)["spec"]["containers"][0]["env"]
    assert not any("MPIOP_STATUS" in str(e.get("value")) for e in launcher)
    assert "mpiop-status-ca.crt" not in objects.config_map(built, [], status_endpoint=settings.status_endpoint)["data"]
