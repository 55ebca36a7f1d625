"""What kubeflow/mpi-operator v0.8.2 left on a real apiserver for its `pi` example (testkit/fixtures/, see its
README): read as the caches would hold it (unit tests), or created again on a control plane as that operator
left it (integration and e2e tests), before mpiop starts.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import yaml

from devcluster.binaries import go_mod_download
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import MPIJob
from mpiop.controller.trims import trim_config_map, trim_launcher_batch_job, trim_pod, trim_secret, trim_service
from mpiop.kube.client import BATCH_JOBS, CONFIGMAPS, MPIJOBS, PODS, SECRETS, SERVICES, ApiError, KubeClient, Resource
from mpiop.plan import Observed

FIXTURES = Path(__file__).parent / "fixtures" / "kubeflow-mpi-operator-v0.8.2"
MOMENTS = ("kf-pi-ok.0-created", "kf-pi-ok.1-running", "kf-pi-ok.2-finished",
           "kf-pi-fail.0-created", "kf-pi-fail.1-running", "kf-pi-fail.2-finished")
RESOURCES: dict[str, Resource] = {"MPIJob": MPIJOBS, "Job": BATCH_JOBS, "Pod": PODS, "ConfigMap": CONFIGMAPS,
                                  "Secret": SECRETS, "Service": SERVICES}


def load(moment: str) -> list[JSON]:
    """The objects of one moment, e.g. `kf-pi-ok.1-running`."""
    items: list[JSON] = json.loads((FIXTURES / f"{moment}.json").read_text())["items"]
    return items


def of_kind(items: list[JSON], kind: str) -> list[JSON]:
    return [copy.deepcopy(o) for o in items if o["kind"] == kind]


def as_cached(moment: str) -> tuple[MPIJob, Observed]:
    """The MPIJob and what mpiop's caches would observe of it (kubeflow's objects carry no mpiop labels,
    so the ConfigMap, Secret and Service are seen only once claimed: as here, after the first pass)."""
    items = load(moment)
    job = MPIJob.model_validate(of_kind(items, "MPIJob")[0])
    pods = [trim_pod(p) for p in of_kind(items, "Pod")]
    launcher_batch_jobs = of_kind(items, "Job")
    return job, Observed(
        pods=[p for p in pods if not _job_owned(p)],
        config_map=trim_config_map(of_kind(items, "ConfigMap")[0]),
        secret=trim_secret(of_kind(items, "Secret")[0]),
        service=trim_service(of_kind(items, "Service")[0]),
        launcher_batch_job=trim_launcher_batch_job(launcher_batch_jobs[0]) if launcher_batch_jobs else None,
        launcher_batch_job_pods=[p for p in pods if _job_owned(p)],
    )


def _job_owned(pod: JSON) -> bool:
    return any(r.get("kind") == "Job" for r in pod["metadata"].get("ownerReferences") or [])


def _fresh(obj: JSON, namespace: str, owner_uids: dict[str, str]) -> JSON:
    """`obj` as a client would create it again in `namespace`, owned by the new uids of its owners."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        meta.pop(key, None)
    meta["namespace"] = namespace
    for ref in meta.get("ownerReferences") or []:
        ref["uid"] = owner_uids[ref["kind"]]
    obj.pop("status", None)
    if obj["kind"] == "Pod":  # the ServiceAccount's token volume is the apiserver's to add
        spec = obj["spec"]
        spec["volumes"] = [v for v in spec.get("volumes") or [] if not v["name"].startswith("kube-api-access-")]
        for container in spec["containers"]:
            container["volumeMounts"] = [m for m in container.get("volumeMounts") or []
                                         if not m["name"].startswith("kube-api-access-")]
    return obj


def _fresh_launcher_batch_job(obj: JSON, namespace: str, owner_uids: dict[str, str]) -> JSON:
    """The apiserver generates a Job's selector and controller-uid labels: the old uid's are dropped."""
    job = _fresh(obj, namespace, owner_uids)
    job["spec"].pop("selector", None)
    labels = job["spec"]["template"]["metadata"]["labels"]
    for key in ("batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name", "job-name"):
        labels.pop(key, None)
    return job


async def _write_status(kube: KubeClient, resource: Resource, namespace: str, name: str, status: JSON) -> JSON:
    return await kube.patch(resource, namespace, name, {"status": status}, subresource="status")


def in_namespace(items: list[JSON], namespace: str) -> list[JSON]:
    """The objects as kubeflow's operator would have made them in `namespace` (hostfile, DNS search, messages)."""
    old = items[0]["metadata"]["namespace"]
    moved: list[JSON] = json.loads(json.dumps(items).replace(f'"{old}"', f'"{namespace}"')
                                   .replace(f".{old}.", f".{namespace}.").replace(f" {old}/", f" {namespace}/"))
    return moved


async def recreate(kube: KubeClient, namespace: str, moment: str, *, pod_status: bool = True,
                   items: list[JSON] | None = None) -> dict[str, JSON]:
    """Create `moment`'s objects (or `items` shaped from them) in `namespace` as kubeflow's operator left them,
    with no operator running.

    The MPIJob gets kubeflow's status; the launcher Job is created again, so the cluster's Job controller
    makes its pod (`<job>-launcher-xxxxx`) as it did for kubeflow; worker pods are created as kubeflow
    created them and, with `pod_status`, given the fixture's phase and readiness (when no kubelet runs them).
    Returns the created objects by `Kind/name`.
    """
    items = in_namespace(items if items is not None else load(moment), namespace)
    created: dict[str, JSON] = {}
    [mpijob] = of_kind(items, "MPIJob")
    job = await kube.create(MPIJOBS, namespace, _fresh(mpijob, namespace, {}))
    job = await _write_status(kube, MPIJOBS, namespace, job["metadata"]["name"], mpijob["status"])
    created[f"MPIJob/{job['metadata']['name']}"] = job
    uids = {"MPIJob": job["metadata"]["uid"]}
    for kind in ("Secret", "ConfigMap", "Service", "Pod"):
        for obj in of_kind(items, kind):
            if kind == "Pod" and _job_owned(obj):
                continue  # the Job controller makes the launcher's pod
            made = await kube.create(RESOURCES[kind], namespace, _fresh(obj, namespace, uids))
            if kind == "Pod" and pod_status:
                made = await _write_status(kube, PODS, namespace, obj["metadata"]["name"], _pod_status(obj))
            created[f"{kind}/{obj['metadata']['name']}"] = made
    for obj in of_kind(items, "Job"):
        made = await kube.create(BATCH_JOBS, namespace, _fresh_launcher_batch_job(obj, namespace, uids))
        created[f"Job/{obj['metadata']['name']}"] = made
    return created


def _pod_status(pod: JSON) -> JSON:
    status: JSON = copy.deepcopy(pod["status"])
    for key in ("hostIP", "hostIPs", "podIP", "podIPs", "qosClass"):
        status.pop(key, None)
    return status


def launcher_pod_status(moment: str) -> JSON:
    """The fixture's status of the launcher Job's pod at `moment`."""
    [pod] = [p for p in of_kind(load(moment), "Pod") if _job_owned(p)]
    return _pod_status(pod)


async def launcher_batch_job_pod(kube: KubeClient, namespace: str, job_name: str = "pi-launcher",
                           timeout: float = 30.0) -> JSON:
    """The pod the Job controller made for kubeflow's launcher Job."""
    for _ in range(int(timeout * 10)):
        pods = await kube.list(PODS, namespace, labelSelector=f"batch.kubernetes.io/job-name={job_name}")
        if pods["items"]:
            found: JSON = pods["items"][0]
            return found
        await asyncio.sleep(0.1)  # poll interval: the Job controller makes the pod within seconds
    raise AssertionError(f"the Job controller made no pod for Job {job_name} in {timeout}s")


async def set_pod_status(kube: KubeClient, namespace: str, name: str, status: JSON) -> JSON:
    try:
        return await _write_status(kube, PODS, namespace, name, status)
    except ApiError as error:
        raise AssertionError(f"writing pod {name}'s status: {error}") from error


def with_image(obj: JSON, image: str) -> JSON:
    """`obj` with every container's image swapped (and never pulled: the real node has it locally)."""
    obj = copy.deepcopy(obj)
    specs: list[JSON] = []
    if obj["kind"] == "MPIJob":
        specs = [r["template"]["spec"] for r in obj["spec"]["mpiReplicaSpecs"].values()]
    elif obj["kind"] == "Job":
        specs = [obj["spec"]["template"]["spec"]]
    elif obj["kind"] == "Pod":
        specs = [obj["spec"]]
    for spec in specs:
        for container in spec.get("containers") or []:
            container["image"] = image
            container["imagePullPolicy"] = "Never"
    return obj


KUBEFLOW_MODULE = "github.com/kubeflow/mpi-operator"
KUBEFLOW_VERSION = "v0.8.2"
KUBEFLOW_CRD_PATH = "manifests/base/kubeflow.org_mpijobs.yaml"


def kubeflow_crd(workdir: Path) -> JSON:
    """kubeflow/mpi-operator's own v2beta1 CRD at the fixtures' version, from its Go module (`go mod download`,
    kept in Go's module cache like the Kubernetes sources the binaries are built from)."""
    source = go_mod_download(KUBEFLOW_MODULE, KUBEFLOW_VERSION, workdir, "Dir")
    loaded: JSON = yaml.safe_load((source / KUBEFLOW_CRD_PATH).read_text())
    return loaded


def crd_defaults(crd: JSON) -> dict[str, Any]:
    """The schema defaults of a v2beta1 MPIJob CRD outside the pod templates, by field path (spec.runPolicy.suspend).
    kubeflow's replica specs are a map and mpiop's two named properties, so templates are left out of both."""
    schema: JSON = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found: dict[str, Any] = {}

    def walk(node: JSON, path: str) -> None:
        if "default" in node:
            found[path] = node["default"]
        for name, child in (node.get("properties") or {}).items():
            if name != "mpiReplicaSpecs":
                walk(child, f"{path}.{name}" if path else name)

    walk(schema, "")
    return found


def with_crd_defaults(crd: JSON, obj: JSON) -> JSON:
    """`obj` as the apiserver returns it under `crd`: each defaulted field outside the pod templates that is
    absent from an object present is filled in (a default inside an absent object is not applied)."""
    out = copy.deepcopy(obj)
    for path, value in crd_defaults(crd).items():
        *parents, field = path.split(".")
        node: JSON | None = out
        for parent in parents:
            node = node.get(parent) if node is not None else None
        if node is not None and field not in node:
            node[field] = value
    return out


if __name__ == "__main__":  # `make test-binaries`: the module in Go's module cache before a test reads its CRD
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        print(kubeflow_crd(Path(scratch))["metadata"]["name"])
