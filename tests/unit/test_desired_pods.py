"""mpiop.desired.pods: worker and launcher Pods built from the job's templates."""

from __future__ import annotations

from typing import Any

import pytest

from mpiop import names
from mpiop.api.v2beta1 import ReplicaSpec, RestartPolicy
from mpiop.desired.pods import WORKER_DEFAULT_COMMAND, launcher_pod, pod_restart_policy, worker_pod
from testkit.mpijobs import MPIJobBuilder, make_mpijob
from testkit.pods import env_of

SSH_ITEMS = [
    {"key": "ssh-privatekey", "path": "id_rsa"},
    {"key": "ssh-publickey", "path": "id_rsa.pub"},
    {"key": "ssh-publickey", "path": "authorized_keys"},
]
# In root's home the key must be 0600 (ssh refuses a key its owner shares); elsewhere the files stay root's
# and the default 0644 lets a non-root user read them (ssh accepts a key owned by another user).
ROOT_SSH_VOLUME = {"name": "ssh-auth", "secret": {"secretName": "pi-ssh", "items": SSH_ITEMS, "defaultMode": 0o600}}
USER_SSH_VOLUME = {"name": "ssh-auth", "secret": {"secretName": "pi-ssh", "items": SSH_ITEMS}}
CONFIG_VOLUME = {
    "name": "mpi-job-config",
    "configMap": {
        "name": "pi-config",
        "items": [
            {"key": "hostfile", "path": "hostfile", "mode": 0o444},
            {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
        ],
    },
}


def test_worker_pod_identity_and_labels() -> None:
    job = make_mpijob("pi", "ns").uid("u-1").obj()
    pod = worker_pod(job, 1, 2)
    assert pod["apiVersion"] == "v1"
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "pi-worker-1"
    assert pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": "worker",
        "training.kubeflow.org/replica-index": "1",
        "mpiop.kubeflow.org/attempt": "2",
    }
    assert pod["metadata"]["ownerReferences"] == [names.owner_reference(job)]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pod["spec"]["hostname"] == "pi-worker-1"
    assert pod["spec"]["subdomain"] == "pi"


def test_launcher_pod_identity_and_labels() -> None:
    job = make_mpijob("pi", "ns").obj()
    pod = launcher_pod(job, 1)
    assert pod["metadata"]["name"] == "pi-launcher-1", "each attempt's launcher has its own name"
    labels = pod["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "launcher"
    assert labels["mpiop.kubeflow.org/attempt"] == "1"
    assert labels["training.kubeflow.org/job-name"] == "pi"
    assert pod["spec"]["hostname"] == "pi-launcher"
    assert pod["spec"]["subdomain"] == "pi"
    assert pod["metadata"]["ownerReferences"] == [names.owner_reference(job)]


@pytest.mark.parametrize(
    ("job", "mount_path", "ssh_volume"),
    [
        (make_mpijob("pi"), "/root/.ssh", ROOT_SSH_VOLUME),
        (make_mpijob("pi").ssh_auth_mount_path("/root/.ssh"), "/root/.ssh", ROOT_SSH_VOLUME),
        (make_mpijob("pi").ssh_auth_mount_path("/home/mpiuser/.ssh"), "/home/mpiuser/.ssh", USER_SSH_VOLUME),
    ],
    ids=["default-path", "root-path-explicit", "custom-path"],
)
def test_volumes_and_mounts(job: MPIJobBuilder, mount_path: str, ssh_volume: dict[str, Any]) -> None:
    worker = worker_pod(job.obj(), 0, 0)
    assert worker["spec"]["volumes"] == [ssh_volume]
    assert worker["spec"]["containers"][0]["volumeMounts"] == [{"name": "ssh-auth", "mountPath": mount_path}]
    launcher = launcher_pod(job.obj(), 0)
    assert launcher["spec"]["volumes"] == [ssh_volume, CONFIG_VOLUME]
    assert launcher["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "ssh-auth", "mountPath": mount_path},
        {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
    ]


def test_user_volumes_kept_and_only_first_container_mounted() -> None:
    job = (
        make_mpijob("pi")
        .pod_spec("Worker", volumes=[{"name": "data", "emptyDir": {}}],
                  containers=[{"name": "main", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]},
                              {"name": "sidecar", "image": "y"}])
        .obj()
    )
    pod = worker_pod(job, 0, 0)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["data", "ssh-auth"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "data", "mountPath": "/d"}, {"name": "ssh-auth", "mountPath": "/root/.ssh"}]
    assert "volumeMounts" not in pod["spec"]["containers"][1]
    assert "env" not in pod["spec"]["containers"][1]


def test_user_volume_of_same_name_wins() -> None:
    own = {"name": "ssh-auth", "secret": {"secretName": "my-keys"}}
    job = (
        make_mpijob("pi")
        .pod_spec("Worker", volumes=[own])
        .container("Worker", volumeMounts=[{"name": "ssh-auth", "mountPath": "/keys"}])
        .obj()
    )
    pod = worker_pod(job, 0, 0)
    assert pod["spec"]["volumes"] == [own]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "ssh-auth", "mountPath": "/keys"}]


@pytest.mark.parametrize(
    ("job", "command", "args"),
    [
        (make_mpijob("pi"), WORKER_DEFAULT_COMMAND, None),
        (make_mpijob("pi").command("Worker", "/start.sh"), ["/start.sh"], None),
        (make_mpijob("pi").args("Worker", "--serve"), None, ["--serve"]),
        (make_mpijob("pi").command("Worker"), WORKER_DEFAULT_COMMAND, None),
    ],
    ids=["no-command-gets-sshd", "command-kept", "args-only-kept", "empty-command-gets-sshd"],
)
def test_worker_default_command(job: MPIJobBuilder, command: list[str] | None, args: list[str] | None) -> None:
    main = worker_pod(job.obj(), 0, 0)["spec"]["containers"][0]
    assert main.get("command") == command
    assert main.get("args") == args


def test_launcher_gets_no_default_command() -> None:
    job = make_mpijob("pi").container("Launcher", command=None).obj()
    main = launcher_pod(job, 0)["spec"]["containers"][0]
    assert main.get("command") is None


def test_worker_default_command_is_a_copy() -> None:
    pod = worker_pod(make_mpijob("pi").obj(), 0, 0)
    pod["spec"]["containers"][0]["command"].append("-x")
    assert WORKER_DEFAULT_COMMAND == ["/usr/sbin/sshd", "-De"]


def test_env_user_wins() -> None:
    job = (
        make_mpijob("pi")
        .env("Launcher", "OMPI_MCA_plm_rsh_args", "-p 2222")
        .env("Launcher", "NVIDIA_VISIBLE_DEVICES", "all")
        .env("Worker", "K_MPI_JOB_ROLE", "custom")
        .obj()
    )
    launcher_env = launcher_pod(job, 0)["spec"]["containers"][0]["env"]
    assert launcher_env[:2] == [{"name": "OMPI_MCA_plm_rsh_args", "value": "-p 2222"},
                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    env = env_of(launcher_pod(job, 0)["spec"]["containers"][0])
    assert env["OMPI_MCA_plm_rsh_args"] == "-p 2222"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert [e["name"] for e in launcher_env].count("NVIDIA_VISIBLE_DEVICES") == 1
    worker_env = worker_pod(job, 0, 0)["spec"]["containers"][0]["env"]
    assert worker_env[0] == {"name": "K_MPI_JOB_ROLE", "value": "custom"}
    assert [e["name"] for e in worker_env].count("K_MPI_JOB_ROLE") == 1


def test_worker_env_has_role_presets_and_no_launcher_variables() -> None:
    env = env_of(worker_pod(make_mpijob("pi").obj(), 0, 0)["spec"]["containers"][0])
    assert env == {"K_MPI_JOB_ROLE": "worker", "MASTER_ADDR": "pi-worker-0.pi.default.svc", "MASTER_PORT": "29500",
                   "WORLD_SIZE": "2", "NPROC_PER_NODE": "1", "LOCAL_WORLD_SIZE": "1"}


def test_presets_on_every_pod_user_wins_and_cluster_domain() -> None:
    """The launcher carries the presets and the list that forwards them; a user's MASTER_PORT is kept."""
    job = make_mpijob("pi").slots(2).env("Launcher", "MASTER_PORT", "1234").env("Worker", "MASTER_PORT", "1234").obj()
    launcher = env_of(launcher_pod(job, 0, "example.org")["spec"]["containers"][0])
    worker = env_of(worker_pod(job, 1, 0, "example.org")["spec"]["containers"][0])
    for env in (launcher, worker):
        assert env["MASTER_ADDR"] == "pi-worker-0.pi.default.svc.example.org"
        assert env["MASTER_PORT"] == "1234"
        assert (env["WORLD_SIZE"], env["NPROC_PER_NODE"], env["LOCAL_WORLD_SIZE"]) == ("4", "2", "2")
    assert launcher["OMPI_MCA_mca_base_env_list"] == ";".join(
        ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NPROC_PER_NODE", "LOCAL_WORLD_SIZE"])
    assert "OMPI_MCA_mca_base_env_list" not in worker


@pytest.mark.parametrize(
    ("replica_policy", "template_policy", "expected"),
    [
        (None, None, "Never"),
        ("Never", None, "Never"),
        ("OnFailure", None, "OnFailure"),
        ("Always", None, "Always"),
        ("ExitCode", None, "Never"),
        (None, "OnFailure", "OnFailure"),
        ("ExitCode", "OnFailure", "Never"),
        ("Never", "Always", "Never"),
    ],
    ids=["default-never", "never", "onfailure", "always", "exitcode-never", "template-used-when-unset",
         "exitcode-beats-template", "replica-beats-template"],
)
def test_restart_policy(replica_policy: RestartPolicy | None, template_policy: str | None, expected: str) -> None:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "main"}]}}
    if template_policy is not None:
        template["spec"]["restartPolicy"] = template_policy
    replica = ReplicaSpec(restart_policy=replica_policy, template=template)
    assert pod_restart_policy(replica) == expected


def test_restart_policy_on_pods() -> None:
    job = make_mpijob("pi").restart_policy("Launcher", "OnFailure").restart_policy("Worker", "ExitCode").obj()
    assert launcher_pod(job, 0)["spec"]["restartPolicy"] == "OnFailure"
    assert worker_pod(job, 0, 0)["spec"]["restartPolicy"] == "Never"


def test_template_labels_annotations_and_spec_kept() -> None:
    job = (
        make_mpijob("pi")
        .pod_label("Worker", "team", "ml")
        .pod_label("Worker", "training.kubeflow.org/job-role", "spoofed")
        .pod_annotation("Worker", "sidecar.istio.io/inject", "false")
        .pod_spec("Worker", nodeSelector={"gpu": "a100"}, tolerations=[{"key": "gpu", "operator": "Exists"}],
                  hostname="ignored", subdomain="ignored")
        .obj()
    )
    pod = worker_pod(job, 0, 0)
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"]["training.kubeflow.org/job-role"] == "worker"
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["spec"]["hostname"] == "pi-worker-0"
    assert pod["spec"]["subdomain"] == "pi"
    assert "annotations" not in launcher_pod(job, 0)["metadata"]


def test_template_not_mutated() -> None:
    job = make_mpijob("pi").env("Launcher", "A", "1").obj()
    before = job.model_dump()
    launcher_pod(job, 0)
    worker_pod(job, 0, 0)
    assert job.model_dump() == before


def test_template_without_containers() -> None:
    job = make_mpijob("pi").obj()
    job.spec.mpi_replica_specs["Worker"].template = {}
    pod = worker_pod(job, 0, 0)
    assert pod["spec"]["containers"][0]["command"] == WORKER_DEFAULT_COMMAND
    assert pod["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    ("template_dns", "cluster_domain", "expected"),
    [
        (None, "", {"searches": ["pi.ns.svc.cluster.local"]}),
        (None, "corp.example", {"searches": ["pi.ns.svc.corp.example"]}),
        ({"searches": ["a.example"], "options": [{"name": "ndots", "value": "2"}]}, "",
         {"searches": ["a.example", "pi.ns.svc.cluster.local"], "options": [{"name": "ndots", "value": "2"}]}),
        ({"searches": ["pi.ns.svc.cluster.local"]}, "", {"searches": ["pi.ns.svc.cluster.local"]}),
    ],
    ids=["default-domain", "configured-domain", "user-searches-kept-first", "not-duplicated"],
)
def test_job_search_domain(template_dns: dict[str, Any] | None, cluster_domain: str,
                           expected: dict[str, Any]) -> None:
    """MPICH's and Intel's proxies call the launcher back by its bare hostname: the job's domain is searched."""
    builder = make_mpijob("pi", "ns")
    for role in ("Launcher", "Worker"):
        if template_dns is not None:
            builder = builder.pod_spec(role, dnsConfig=template_dns)
    job = builder.obj()
    assert worker_pod(job, 1, 0, cluster_domain)["spec"]["dnsConfig"] == expected
    assert launcher_pod(job, 0, cluster_domain)["spec"]["dnsConfig"] == expected
    assert job.spec.worker is not None
    assert (job.spec.worker.template["spec"].get("dnsConfig") or {}).get("searches") == (
        None if template_dns is None else template_dns["searches"])


@pytest.mark.parametrize(("template", "expected"), [
    ({}, None),
    ({"hostNetwork": False}, None),
    ({"hostNetwork": True}, "ClusterFirstWithHostNet"),
    ({"hostNetwork": True, "dnsPolicy": "Default"}, "Default"),
    ({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"]}}, "None"),
], ids=["pod-network", "host-network-false", "host-network", "user-policy-kept", "no-host-network-user-policy"])
def test_host_network_pods_resolve_cluster_names(template: dict[str, Any], expected: str | None) -> None:
    """On the host network a pod would resolve with the node's DNS: the job's pod names need the cluster's."""
    builder = make_mpijob("pi")
    for role in ("Launcher", "Worker"):
        builder = builder.pod_spec(role, **template)
    job = builder.obj()
    assert worker_pod(job, 0, 0)["spec"].get("dnsPolicy") == expected
    assert launcher_pod(job, 0)["spec"].get("dnsPolicy") == expected


@pytest.mark.parametrize(("template", "expected"), [
    ({}, False),
    ({"serviceAccountName": "train"}, None),
    ({"serviceAccount": "train"}, None),
    ({"automountServiceAccountToken": True}, True),
    ({"serviceAccountName": "train", "automountServiceAccountToken": False}, False),
], ids=["default-account", "named-account", "deprecated-named-account", "user-asks-for-token", "user-says-no"])
def test_no_default_service_account_token(template: dict[str, Any], expected: bool | None) -> None:
    """MPI pods do not talk to the apiserver: the namespace's default token is not mounted unless asked for."""
    builder = make_mpijob("pi")
    for role in ("Launcher", "Worker"):
        builder = builder.pod_spec(role, **template)
    job = builder.obj()
    assert worker_pod(job, 0, 0)["spec"].get("automountServiceAccountToken") == expected
    assert launcher_pod(job, 0)["spec"].get("automountServiceAccountToken") == expected
