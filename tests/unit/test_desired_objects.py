"""mpiop.desired.objects: the SSH Secret, the hostfile ConfigMap and the headless Service."""

from __future__ import annotations

import base64

from mpiop import names
from mpiop.desired import objects
from testkit.mpijobs import make_mpijob


def test_ssh_secret() -> None:
    job = make_mpijob("pi", "ns").uid("u-9").obj()
    secret = objects.ssh_secret(job, b"PRIVATE", b"ssh-ed25519 AAAA mpiop\n")
    assert secret["apiVersion"] == "v1"
    assert secret["kind"] == "Secret"
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert secret["immutable"] is True
    assert secret["metadata"]["name"] == "pi-ssh"
    assert secret["metadata"]["namespace"] == "ns"
    assert secret["metadata"]["labels"] == {**names.job_labels(job), "app": "pi"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-9"
    assert base64.b64decode(secret["data"]["ssh-privatekey"]) == b"PRIVATE"
    assert base64.b64decode(secret["data"]["ssh-publickey"]) == b"ssh-ed25519 AAAA mpiop\n"


def test_service_is_headless_and_publishes_not_ready() -> None:
    job = make_mpijob("pi", "ns").obj()
    service = objects.service(job)
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == "pi"
    assert service["metadata"]["ownerReferences"] == [names.owner_reference(job)]
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": "pi"},
        "publishNotReadyAddresses": True,
    }


def test_config_map() -> None:
    job = make_mpijob("pi", "ns").workers(2).slots(2).obj()
    config_map = objects.config_map(job, [1], "cluster.local")
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["name"] == "pi-config"
    assert config_map["metadata"]["ownerReferences"] == [names.owner_reference(job)]
    assert config_map["data"] == {
        "hostfile": "pi-worker-0.pi.ns.svc.cluster.local slots=2\npi-worker-1.pi.ns.svc.cluster.local slots=2\n",
        "discover_hosts.sh": "#!/bin/sh\necho pi-worker-1.pi.ns.svc.cluster.local:2\n",
    }
    assert objects.config_map_data(job, [1], "cluster.local") == config_map["data"]
