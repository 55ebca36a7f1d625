"""deploy/: the kustomize base, its Prometheus overlay and the Helm chart, checked by the real apiserver.

`kubectl apply --server-side --dry-run=server` runs every admission step but storage. Namespaced objects
need their namespace to exist, so mpiop-system is created for real (from deploy/base/namespace.yaml); the
MPIJob CRD is installed by the session fixture, and the ServiceMonitor's and PrometheusRule's kinds by minimal
stand-ins of the Prometheus Operator's CRDs (monitoring.coreos.com/v1, schema left open). helm is built from its
Go module by hack/helm.sh into .cache/ (once; minutes) and only renders: `helm template | kubectl apply`.
"""

from __future__ import annotations

import argparse
import re
import subprocess

import pytest

from devcluster.controlplane import ControlPlane
from mpiop import status_serving
from mpiop.api.raw import JSON
from mpiop.controller.manager import ManagerConfig
from mpiop.desired.launch import DEFAULT_KUBECTL_IMAGE
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.kube.client import PODS, ApiError, KubeClient
from mpiop.run_flags import add_run_arguments, config_from_args
from mpiop.server import Limits
from mpiop.serving.layout_webhook import WebhookLimits
from mpiop.serving.token_reviews import ReviewLimits
from testkit.deploy import CHART, DEPLOY, SYSTEM, docs, render
from testkit.operator import eventually


def _open_crd(kind: str, plural: str) -> str:
    """A stand-in for one of the Prometheus Operator's CRDs: the kind is served, its schema left open."""
    return f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


PROMETHEUS_OPERATOR_CRDS = _open_crd("ServiceMonitor", "servicemonitors") + "---" + _open_crd("PrometheusRule",
                                                                                             "prometheusrules")


def identity(obj: JSON) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def by_kind(objects: list[JSON]) -> dict[str, JSON]:
    return {obj["kind"]: obj for obj in objects}


@pytest.fixture(scope="session")
def kustomized(control_plane: ControlPlane) -> list[JSON]:
    """deploy/base, built by kubectl's kustomize."""
    return docs(control_plane.kubectl("kustomize", str(DEPLOY / "base")))


@pytest.fixture(scope="session")
def system_namespace(control_plane: ControlPlane, mpijob_crd: None) -> str:
    control_plane.kubectl("apply", "--server-side", "-f", str(DEPLOY / "base" / "namespace.yaml"))
    return SYSTEM


@pytest.fixture(scope="session")
def service_monitor_crd(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "--server-side", "-f", "-", input_text=PROMETHEUS_OPERATOR_CRDS)
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")


def dry_run(control_plane: ControlPlane, *source: str, input_text: str | None = None) -> set[str]:
    """Apply server-side with --dry-run=server; the `kind/name` of every object the apiserver accepted."""
    out = control_plane.kubectl("apply", "--server-side", "--dry-run=server", *source, input_text=input_text)
    return set(re.findall(r"^(\S+) serverside-applied \(server dry run\)$", out, re.MULTILINE))


BASE_OBJECTS = {
    "namespace/mpiop-system", "customresourcedefinition.apiextensions.k8s.io/mpijobs.kubeflow.org",
    "serviceaccount/mpiop", "clusterrole.rbac.authorization.k8s.io/mpiop",
    "clusterrolebinding.rbac.authorization.k8s.io/mpiop", "role.rbac.authorization.k8s.io/mpiop-leader-election",
    "rolebinding.rbac.authorization.k8s.io/mpiop-leader-election", "service/mpiop-metrics", "service/mpiop-status",
    "role.rbac.authorization.k8s.io/mpiop-status-endpoint",
    "rolebinding.rbac.authorization.k8s.io/mpiop-status-endpoint",
    "deployment.apps/mpiop", "poddisruptionbudget.policy/mpiop",
    "mutatingwebhookconfiguration.admissionregistration.k8s.io/mpiop-gpu-layout",
}


def test_kustomize_base_passes_a_server_side_dry_run(control_plane: ControlPlane, system_namespace: str) -> None:
    assert dry_run(control_plane, "-k", str(DEPLOY / "base")) == BASE_OBJECTS


def test_prometheus_overlay_passes_a_server_side_dry_run(control_plane: ControlPlane, system_namespace: str,
                                                         service_monitor_crd: None) -> None:
    accepted = dry_run(control_plane, "-k", str(DEPLOY / "overlays" / "prometheus"))
    assert accepted == BASE_OBJECTS | {"servicemonitor.monitoring.coreos.com/mpiop",
                                       "prometheusrule.monitoring.coreos.com/mpiop", "configmap/mpiop-dashboard"}


@pytest.mark.parametrize("values", [
    (),
    ("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
     "metrics.grafanaDashboard.enabled=true", "logFormat=console", "logLevel=debug", "workers=16"),
    ("replicaCount=1", "leaderElection.enabled=false", "metrics.enabled=false", "namespace.create=true"),
    ("watchNamespace={namespace}", "leaderElection.leaseDuration=30s", "leaderElection.id=other"),
], ids=["defaults", "servicemonitor", "single-replica", "one-namespace"])
def test_helm_chart_passes_a_server_side_dry_run(control_plane: ControlPlane, system_namespace: str,
                                                 service_monitor_crd: None, namespace: str, helm: str,
                                                 values: tuple[str, ...]) -> None:
    # The (large) CRD once, with the defaults; the variants change nothing in it.
    rendered = render(helm, *(v.format(namespace=namespace) for v in values), crds=not values)
    objects = docs(rendered)
    accepted = dry_run(control_plane, "-f", "-", input_text=rendered)
    assert len(accepted) == len(objects)
    kinds = {obj["kind"] for obj in objects}
    args = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    if "watchNamespace={namespace}" in values:
        assert {"Role", "RoleBinding"} <= kinds and not {"ClusterRole", "ClusterRoleBinding"} & kinds
        assert f"--namespace={namespace}" in args and "--leader-elect-lease-duration=30s" in args
        assert "--no-gpu-layout" in args  # a Role cannot grant nodes: no Node informer
        lease_rules = next(o for o in objects if o["metadata"]["name"] == "mpiop-leader-election")["rules"]
        assert lease_rules[1]["resourceNames"] == ["other"] and "--leader-elect-id=other" in args
        assert "--no-status-endpoint" in args, "a namespaced Role cannot grant tokenreviews"
        assert "MutatingWebhookConfiguration" not in kinds  # no status endpoint to serve it, no nodes to lay out on
    else:
        assert "--no-gpu-layout" not in args
        webhook = by_kind(objects)["MutatingWebhookConfiguration"]
        service = webhook["webhooks"][0]["clientConfig"]["service"]
        assert (service["name"], service["port"]) == ("mpiop-status", 8443)  # the leader's status endpoint
        assert f"--gpu-layout-webhook={webhook['metadata']['name']}" in args
        # The status endpoint's CA: the Secret the process is pointed at is the one its Role may read and renew.
        role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-status-endpoint"))
        secret_rule = next(r for r in role["rules"] if r["resources"] == ["secrets"] and r.get("resourceNames"))
        assert f"--status-ca-secret={secret_rule['resourceNames'][0]}" in args and secret_rule["verbs"] == ["get",
                                                                                                           "update"]
    if "leaderElection.enabled=false" in values:
        assert "--leader-elect" not in args and "--metrics-addr=0" in args
        services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
        assert "PodDisruptionBudget" not in kinds and services == {"mpiop-status"} and "Namespace" in kinds
    if "metrics.serviceMonitor.enabled=true" in values:
        assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= kinds
        assert "--log-format=console" in args and "--workers=16" in args


def test_helm_refuses_two_replicas_without_leader_election(helm: str) -> None:
    result = subprocess.run([helm, "template", "mpiop", str(CHART), "--set", "leaderElection.enabled=false"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "needs leaderElection.enabled" in result.stderr


def test_helm_renders_the_objects_kustomize_does(kustomized: list[JSON], helm: str) -> None:
    base = kustomized
    chart = docs(render(helm, "namespace.create=true"))
    assert sorted(map(identity, chart)) == sorted(map(identity, base))
    ours, theirs = by_kind(chart), by_kind(base)
    assert ours["CustomResourceDefinition"] == theirs["CustomResourceDefinition"]
    for kind in ("ClusterRole", "Role"):
        assert ours[kind]["rules"] == theirs[kind]["rules"], kind
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert ours[kind]["subjects"] == theirs[kind]["subjects"] and ours[kind]["roleRef"] == theirs[kind]["roleRef"]
    pod, base_pod = (o["Deployment"]["spec"]["template"]["spec"] for o in (ours, theirs))
    assert ours["Deployment"]["spec"]["replicas"] == theirs["Deployment"]["spec"]["replicas"] == 2
    for key in ("securityContext", "serviceAccountName", "volumes", "terminationGracePeriodSeconds"):
        assert pod[key] == base_pod[key], key
    container, base_container = pod["containers"][0], base_pod["containers"][0]
    for key in ("image", "args", "env", "ports", "livenessProbe", "readinessProbe", "resources", "securityContext",
                "volumeMounts"):
        assert container[key] == base_container[key], key
    assert ours["Service"]["spec"]["ports"] == theirs["Service"]["spec"]["ports"]
    assert ours["MutatingWebhookConfiguration"]["webhooks"] == theirs["MutatingWebhookConfiguration"]["webhooks"]
    assert ours["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    labels = ours["Namespace"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == theirs["Namespace"]["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"


async def test_the_operator_pod_passes_the_restricted_pod_security_standard(
        kustomized: list[JSON], kube: KubeClient, system_namespace: str) -> None:
    """mpiop-system enforces `restricted`; the apiserver admits the Deployment's pod and refuses a lax one."""
    template = by_kind(kustomized)["Deployment"]["spec"]["template"]
    # The namespace's own ServiceAccount: this test does not depend on deploy/'s being applied for real.
    pod: JSON = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "mpiop-", "labels": template["metadata"]["labels"]},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    await eventually(lambda: _exists(kube, f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/default"),
                     what="the default ServiceAccount of mpiop-system")
    admitted = await kube.request("POST", PODS.path(SYSTEM), body=pod, query={"dryRun": "All"})
    container = admitted["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}

    lax = {**pod, "spec": {**pod["spec"], "securityContext": {},
                           "containers": [{"name": "mpiop", "image": container["image"]}]}}
    with pytest.raises(ApiError) as refused:
        await kube.request("POST", PODS.path(SYSTEM), body=lax, query={"dryRun": "All"})
    assert refused.value.status == 403 and "restricted" in refused.value.message


async def _exists(kube: KubeClient, path: str) -> bool:
    try:
        await kube.request("GET", path)
    except ApiError as error:
        if error.not_found:
            return False
        raise
    return True


def test_the_image_runs_as_the_uid_the_deployment_requires() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    deployment = next(d for d in docs((DEPLOY / "base" / "deployment.yaml").read_text()) if d["kind"] == "Deployment")
    uid = deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert re.search(rf"^USER {uid}:{uid}$", dockerfile, re.MULTILINE)
    assert re.search(r"^FROM python:\$\{PYTHON_VERSION\}-slim$", dockerfile, re.MULTILINE)
    assert "PYTHONDONTWRITEBYTECODE=1" in dockerfile  # nothing written next to the code at run time


@pytest.mark.parametrize(("overlay", "value", "group"), [
    ("scheduler-plugins", "scheduler-plugins-scheduler", "scheduling.x-k8s.io"),
    ("volcano", "volcano", "scheduling.volcano.sh"),
    ("kubernetes-gang", "kubernetes", "scheduling.k8s.io"),
])
def test_gang_scheduling_overlay_and_chart_value_agree(control_plane: ControlPlane, system_namespace: str,
                                                       helm: str, overlay: str, value: str, group: str) -> None:
    """The overlay and `gangScheduling` add the same flag and one podgroups rule of that scheduler's group only."""
    assert dry_run(control_plane, "-k", str(DEPLOY / "overlays" / overlay)) == BASE_OBJECTS
    theirs = by_kind(docs(control_plane.kubectl("kustomize", str(DEPLOY / "overlays" / overlay))))
    ours = by_kind(docs(render(helm, f"gangScheduling={value}", "namespace.create=true", crds=False)))
    assert ours["ClusterRole"]["rules"] == theirs["ClusterRole"]["rules"]
    assert theirs["ClusterRole"]["rules"][-1] == {"apiGroups": [group], "resources": ["podgroups"],
                                                  "verbs": ["list", "watch", "create", "patch", "delete"]}
    args = [obj["spec"]["template"]["spec"]["containers"][0]["args"] for obj in (ours["Deployment"],
                                                                                   theirs["Deployment"])]
    assert args[0] == args[1] and f"--gang-scheduling={value}" in args[0]


def chart_args(helm: str, *values: str) -> argparse.Namespace:
    """The chart's container args, parsed by the operator's own parser."""
    deployment = by_kind(docs(render(helm, *values, crds=False)))["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args([a for a in args if a != "run"])


def chart_config(helm: str, *values: str) -> ManagerConfig:
    """The operator's config from the chart's container args, parsed by the operator's own parser."""
    return config_from_args(chart_args(helm, *values))


@pytest.mark.parametrize(("values", "lifecycle_events", "discover_hosts"), [
    ((), True, True),
    (("lifecycleEvents=false", "discoverHosts=false"), False, False),
], ids=["kubeflow-defaults", "lean"])
def test_lean_chart_values_reach_the_operator(helm: str, values: tuple[str, ...], lifecycle_events: bool,
                                              discover_hosts: bool) -> None:
    """The chart's container args, parsed by the operator's own parser, give the config the values ask for."""
    config = chart_config(helm, *values)
    assert (config.lifecycle_events, config.settings.discover_hosts) == (lifecycle_events, discover_hosts)


@pytest.mark.parametrize(("values", "launch", "image", "grace"), [
    ((), "ssh", DEFAULT_KUBECTL_IMAGE, 300),
    (("execLaunch.enabled=true", "execLaunch.default=exec", "execLaunch.kubectlImage=example.org/kubectl:v1",
      "execLaunch.kubectlImageGraceSeconds=900"), "exec", "example.org/kubectl:v1", 900),
], ids=["ssh", "exec"])
def test_exec_launch_chart_values_reach_the_operator(helm: str, values: tuple[str, ...], launch: str,
                                                     image: str, grace: int) -> None:
    settings = chart_config(helm, *values).settings
    assert (settings.default_launch, settings.kubectl_image, settings.kubectl_image_grace_seconds) == (
        launch, image, grace)


@pytest.mark.parametrize(("values", "expected"), [
    ((), (10, 3, frozenset(), 8)),
    (("maxDisruptionRestarts=0", "keptAttempts=5", "nodeFaultExitCodes={74,75}", "maxExcludedNodes=2"),
     (0, 5, frozenset({74, 75}), 2)),
], ids=["defaults", "set"])
def test_restart_chart_values_reach_the_operator(helm: str, values: tuple[str, ...],
                                                 expected: tuple[int, int, frozenset[int], int]) -> None:
    """The disruption budget, kept attempts and node exclusion values, through the operator's own parser."""
    settings = chart_config(helm, *values).settings
    assert (settings.max_disruption_restarts, settings.kept_attempts, settings.node_fault_exit_codes,
            settings.max_excluded_nodes) == expected


LIMITS_SET = Limits(max_connections=2000, max_connections_per_source=10, connections_per_source_qps=7.5,
                    connections_per_source_burst=15, idle_seconds=5.0, max_headers=16, max_header_bytes=4096,
                    request_seconds=20.0, body_bytes_in_flight=2_000_000)
REVIEWS_SET = ReviewLimits(in_flight=8, per_source_qps=2.5, per_source_burst=10, cache_size=50_000, queue=500)


@pytest.mark.parametrize(("values", "expected"), [
    ((), ((DEFAULT_SETTINGS.stop_grace_seconds, DEFAULT_SETTINGS.max_stop_grace_seconds),
          DEFAULT_SETTINGS.gpu_device_classes, DEFAULT_SETTINGS.gpu_layout_max_entries, Limits(), ReviewLimits())),
    (("stopGraceSeconds=120", "maxStopGraceSeconds=300", "gpuDeviceClasses={gpu.nvidia.com,mig.nvidia.com}",
      "gpuLayoutMaxEntries=500",
      *(f"statusEndpoint.limits.{key}={value}" for key, value in {
          "maxConnections": 2000, "maxConnectionsPerSource": 10, "connectionsPerSourceQps": 7.5,
          "connectionsPerSourceBurst": 15, "idleSeconds": 5, "maxHeaders": 16,
          "maxHeaderBytes": 4096, "requestSeconds": 20, "reviewInFlight": 8, "reviewPerSourceQps": 2.5,
          "reviewPerSourceBurst": 10, "tokenCacheSize": 50000, "reviewQueue": 500,
          "bodyBytesInFlight": 2000000}.items())),
     ((120, 300), frozenset({"gpu.nvidia.com", "mig.nvidia.com"}), 500, LIMITS_SET, REVIEWS_SET)),
    (("gpuDeviceClasses={}",), ((DEFAULT_SETTINGS.stop_grace_seconds, DEFAULT_SETTINGS.max_stop_grace_seconds),
                                frozenset(), DEFAULT_SETTINGS.gpu_layout_max_entries, Limits(), ReviewLimits())),
], ids=["defaults", "set", "no-gpu-device-classes"])
def test_stop_grace_gpu_and_status_limit_chart_values_reach_the_operator(
        helm: str, values: tuple[str, ...],
        expected: tuple[tuple[int, int], frozenset[str], int, Limits, ReviewLimits]) -> None:
    """Unset, each is the operator's own default (no flag); set, its flag, through the operator's own parser: every
    key of statusEndpoint.limits is a --status-* flag."""
    args = chart_args(helm, *values)
    settings, serving = config_from_args(args).settings, status_serving.ServingConfig.from_args(args)
    assert ((settings.stop_grace_seconds, settings.max_stop_grace_seconds), settings.gpu_device_classes,
            settings.gpu_layout_max_entries, serving.limits, serving.reviews) == expected


@pytest.mark.parametrize(("values", "expected"),
                         [((), DEFAULT_SETTINGS.max_mpijob_kib), (("maxMpijobKib=1024",), 1024)],
                         ids=["default", "set"])
def test_the_mpijob_size_bound_chart_value_reaches_the_operator(helm: str, values: tuple[str, ...],
                                                                 expected: int) -> None:
    assert config_from_args(chart_args(helm, *values)).settings.max_mpijob_kib == expected


def test_the_webhook_chart_values_reach_the_operator_and_mount_the_client_ca(helm: str) -> None:
    assert status_serving.ServingConfig.from_args(chart_args(helm)).webhook_limits == WebhookLimits()
    assert chart_args(helm).gpu_layout_client_ca == ""
    values = ("gpuLayoutPerSourceQps=2.5", "gpuLayoutPerSourceBurst=3", "gpuLayoutClientCA.secretName=webhook-ca")
    args = chart_args(helm, *values)
    assert status_serving.ServingConfig.from_args(args).webhook_limits == WebhookLimits(per_source_qps=2.5,
                                                                                        per_source_burst=3)
    assert args.gpu_layout_client_ca == "/etc/mpiop/gpu-layout-client-ca/ca.crt"
    pod = by_kind(docs(render(helm, *values, crds=False)))["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "gpu-layout-client-ca", "secret": {"secretName": "webhook-ca", "items": [
        {"key": "ca.crt", "path": "ca.crt"}]}} in pod["volumes"]
    assert {"name": "gpu-layout-client-ca", "mountPath": "/etc/mpiop/gpu-layout-client-ca", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]


def test_helm_refuses_an_unknown_status_limit(helm: str) -> None:
    result = subprocess.run([helm, "template", "mpiop", str(CHART), "--set", "statusEndpoint.limits.maxConnection=5"],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "statusEndpoint.limits.maxConnection is not a status endpoint limit" in result.stderr


def test_helm_refuses_exec_by_default_without_its_rights(helm: str) -> None:
    result = subprocess.run([helm, "template", "mpiop", str(CHART), "--set", "execLaunch.default=exec"],
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "execLaunch.default exec needs execLaunch.enabled" in result.stderr


def test_exec_launch_overlay_and_chart_value_agree(control_plane: ControlPlane, system_namespace: str,
                                                   helm: str) -> None:
    """The overlay and `execLaunch` add the same rights: what each exec launcher gets (that mpiop must hold to
    grant it), and making its ServiceAccount, Role and RoleBinding; never escalate or bind."""
    overlay = DEPLOY / "overlays" / "exec-launch"
    assert dry_run(control_plane, "-k", str(overlay)) == BASE_OBJECTS
    theirs = by_kind(docs(control_plane.kubectl("kustomize", str(overlay))))
    ours = by_kind(docs(render(helm, "execLaunch.enabled=true", "execLaunch.default=exec", "namespace.create=true",
                               crds=False)))
    assert ours["ClusterRole"]["rules"] == theirs["ClusterRole"]["rules"]
    base = by_kind(docs(control_plane.kubectl("kustomize", str(DEPLOY / "base"))))["ClusterRole"]["rules"]
    added = theirs["ClusterRole"]["rules"][len(base):]
    assert theirs["ClusterRole"]["rules"][:len(base)] == base
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in added} == {
        (("serviceaccounts",), ("create",)), (("roles",), ("create", "patch")), (("rolebindings",), ("create",)),
        (("pods",), ("get",)), (("pods/exec",), ("create", "get"))}
    args = [obj["spec"]["template"]["spec"]["containers"][0]["args"] for obj in (ours["Deployment"],
                                                                                   theirs["Deployment"])]
    assert args[0] == args[1] and "--default-launch=exec" in args[0]


def _ingress(policy: JSON) -> list[tuple[str, list[JSON]]]:
    """(port, peers) of each ingress rule of a NetworkPolicy."""
    return [(port["port"], rule["from"]) for rule in policy["spec"]["ingress"] for port in rule["ports"]]


JOB_PODS = {"namespaceSelector": {}, "podSelector": {"matchExpressions": [
    {"key": "training.kubeflow.org/job-name", "operator": "Exists"}]}}
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_network_policy_overlay_passes_a_server_side_dry_run(control_plane: ControlPlane,
                                                              system_namespace: str) -> None:
    """Into mpiop's pods only Prometheus (:metrics), the jobs' pods and the apiserver (:status); the probes' port
    has no rule (the kubelet probes from the node, always allowed), and nothing else is let in."""
    overlay = str(DEPLOY / "overlays" / "network-policy")
    assert dry_run(control_plane, "-k", overlay) == BASE_OBJECTS | {"networkpolicy.networking.k8s.io/mpiop"}
    objects = docs(control_plane.kubectl("kustomize", overlay))
    policy = by_kind(objects)["NetworkPolicy"]
    deployment = by_kind(objects)["Deployment"]
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert _ingress(policy) == [("metrics", [PROMETHEUS]),
                                ("status", [JOB_PODS, {"ipBlock": {"cidr": "192.0.2.0/24"}}])]
    ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"metrics", "health", "status"}  # the policy names two of them; health is the kubelet's


def test_helm_network_policy_passes_a_server_side_dry_run_and_matches_the_overlay(
        control_plane: ControlPlane, system_namespace: str, helm: str) -> None:
    rendered = render(helm, "networkPolicy.enabled=true", "networkPolicy.apiserver[0].ipBlock.cidr=10.0.0.0/24",
                      crds=False)
    objects = docs(rendered)
    assert "networkpolicy.networking.k8s.io/mpiop" in dry_run(control_plane, "-f", "-", input_text=rendered)
    policy = by_kind(objects)["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == by_kind(objects)["Deployment"]["spec"]["selector"][
        "matchLabels"]
    assert _ingress(policy) == [("metrics", [PROMETHEUS]),
                                ("status", [JOB_PODS, {"ipBlock": {"cidr": "10.0.0.0/24"}}])]
    assert "NetworkPolicy" not in {o["kind"] for o in docs(render(helm, crds=False))}  # off by default
    lean = by_kind(docs(render(helm, "networkPolicy.enabled=true", "statusEndpoint.enabled=false",
                               "metrics.enabled=false", "replicaCount=1", "leaderElection.enabled=false",
                               crds=False)))["NetworkPolicy"]
    assert not lean["spec"].get("ingress"), lean  # no metrics, no status endpoint: nothing comes in


def test_helm_refuses_a_network_policy_without_the_apiservers_addresses(helm: str) -> None:
    result = subprocess.run([helm, "template", "mpiop", str(CHART), "--set", "networkPolicy.enabled=true"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "networkPolicy.apiserver" in result.stderr
