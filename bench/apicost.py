"""What each kind of request the operator sends costs the apiserver: CPU per request, by kind.

On a CPU-bound machine a request's cost to the apiserver (and etcd) is what it takes from every other
component, so this says which of a job's requests are worth saving. It runs the real control plane (etcd,
kube-apiserver, kube-controller-manager) with this checkout's MPIJob CRD and sends `--requests` requests of
each kind, 16 in flight, with the bench's own job and object builders; the apiserver's and etcd's CPU
seconds over each batch, divided by the batch, are the figures. The last line is one JSON object.

    .venv/bin/python -m bench.apicost [--requests 400] [--without-cel [--without-template-schema]]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.cpu import CpuMeter
from bench.harness import bench_job, first_status, owned_objects
from bench.phases import gather_limited
from devcluster.controlplane import ControlPlane
from devcluster.install import install_custom_resource
from mpiop import names
from mpiop.api.crd import crd
from mpiop.api.raw import JSON
from mpiop.controller.events import event_body
from mpiop.kube.client import (
    CONFIGMAPS,
    METADATA_LIST_MEDIA_TYPE,
    MPIJOBS,
    PODS,
    SECRETS,
    SERVICES,
    KubeClient,
    Resource,
)
from mpiop.plan import Event
from testkit.namespaces import create_namespace

EVENTS = Resource("", "v1", "events", "Event")
IN_FLIGHT = 16


def event(job: JSON, reason: str) -> JSON:
    """An Event as the operator's recorder sends it (a new one per reason and job): its own body builder."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = job["metadata"]
    involved = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
                "namespace": meta["namespace"], "uid": meta["uid"]}
    message = f"MPIJob {meta['namespace']}/{meta['name']} is created."
    return event_body(meta["namespace"], involved, Event("Normal", reason, message), "bench", now, now)


def without_cel(node: Any) -> Any:
    """The CRD with every CEL rule (x-kubernetes-validations) taken out: what the rules cost a write."""
    if isinstance(node, dict):
        return {k: without_cel(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [without_cel(v) for v in node]
    return node


def without_template_schema(definition: JSON) -> JSON:
    """The CRD with each replica's pod template left unchecked (any object kept as sent): what validating the
    PodTemplateSpec schema (about 330 KB of it per replica) costs a write."""
    unchecked = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    versions = []
    for version in definition["spec"]["versions"]:
        version = json.loads(json.dumps(version))
        replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["mpiReplicaSpecs"]
        for replica in replicas["properties"].values():
            described = replica["properties"]["template"].get("description", "")
            replica["properties"]["template"] = {**unchecked, "description": described}
        versions.append(version)
    return {**definition, "spec": {**definition["spec"], "versions": versions}}


async def measure(plane: ControlPlane, count: int, cel: bool = True, template_schema: bool = True) -> dict[str, JSON]:
    kube = await KubeClient.connect(str(plane.kubeconfig), qps=0, burst=1000)
    costs: dict[str, JSON] = {}
    definition = crd() if cel else without_cel(crd())
    try:
        await install_custom_resource(kube, definition if template_schema else without_template_schema(definition),
                                      MPIJOBS)
        ns = await create_namespace(kube, "apicost")
        pids = {k: v for k, v in plane.pids_by_name().items() if k in ("kube-apiserver", "etcd")}

        async def batch(kind: str, requests: list[Callable[[], Any]]) -> None:
            await asyncio.sleep(1.0)  # the previous batch's watch fan-out and compaction settle
            meter, started = CpuMeter(pids), time.monotonic()
            await gather_limited(IN_FLIGHT, requests)
            spent, wall = meter.stop(), time.monotonic() - started
            costs[kind] = {"apiserver_ms": round(1000 * spent["kube-apiserver"] / count, 2),
                           "etcd_ms": round(1000 * spent["etcd"] / count, 2), "wall_s": round(wall, 2)}
            print(f"{kind:<34} kube-apiserver {costs[kind]['apiserver_ms']:5.2f} ms   etcd "
                  f"{costs[kind]['etcd_ms']:5.2f} ms   ({count} in {wall:.2f} s)", flush=True)

        # The CRD's first writes set up its handler and CEL programs: not counted.
        await gather_limited(IN_FLIGHT, [partial(kube.create, MPIJOBS, ns, bench_job(f"warm-{i}", 8))
                                         for i in range(IN_FLIGHT)])
        manifests = [bench_job(f"cost-{i}", 8) for i in range(count)]
        await batch("POST mpijobs", [partial(kube.create, MPIJOBS, ns, m) for m in manifests])
        jobs = [await kube.get(MPIJOBS, ns, m["metadata"]["name"]) for m in manifests]
        await batch("PATCH mpijobs/status (first status)", [
            partial(kube.patch, MPIJOBS, ns, j["metadata"]["name"], {"status": first_status(j)}, subresource="status")
            for j in jobs])
        await batch("PATCH mpijobs/status (one field)", [
            partial(kube.patch, MPIJOBS, ns, j["metadata"]["name"],
                    {"status": {"lastReconcileTime": "2026-01-01T00:00:00Z"}}, subresource="status") for j in jobs])
        # The same one-field change as a PUT of the whole object (needs `update` on mpijobs/status).
        jobs = [await kube.get(MPIJOBS, ns, j["metadata"]["name"]) for j in jobs]
        await batch("PUT mpijobs/status (one field)", [
            partial(kube.replace, MPIJOBS, ns, j["metadata"]["name"],
                    {**j, "status": {**j["status"], "lastReconcileTime": "2026-01-02T00:00:00Z"}},
                    subresource="status") for j in jobs])
        made = [owned_objects(j) for j in jobs]  # Secret, ConfigMap, Service, workers..., launcher
        for index, resource in enumerate((SECRETS, CONFIGMAPS, SERVICES, PODS)):  # a worker pod each
            assert made[0][index]["kind"] == resource.kind
            await batch(f"POST {resource.plural}", [partial(kube.create, resource, ns, objs[index]) for objs in made])
        hostfile_patch = {"data": {names.DISCOVER_HOSTS_NAME: "#!/bin/sh\n"}}
        await batch("PATCH configmaps (discover_hosts.sh)", [
            partial(kube.patch, CONFIGMAPS, ns, objs[1]["metadata"]["name"], hostfile_patch) for objs in made])
        await batch("POST events", [partial(kube.create, EVENTS, ns, event(j, "MPIJobCreated")) for j in jobs])
        selectors = [f"{names.JOB_NAME_LABEL}={j['metadata']['name']}" for j in jobs]
        await batch("DELETE pods (collection of 1)", [
            partial(kube.delete_collection, PODS, ns, label_selector=s) for s in selectors])
        # The same with a consistent list (no resourceVersion=0): from etcd, or from the watch cache once
        # etcd's progress notifications say it is current (etcd 3.6; Kubernetes' ConsistentListFromCache).
        await gather_limited(IN_FLIGHT, [partial(kube.create, PODS, ns, objs[3]) for objs in made])
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        await batch("DELETE pods (collection of 1, consistent)", [
            partial(kube.request, "DELETE", PODS.path(ns), query={"labelSelector": s}, body=options,
                    accept=METADATA_LIST_MEDIA_TYPE) for s in selectors])
    finally:
        await kube.close()
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.apicost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests of each kind (400)")
    parser.add_argument("--without-cel", action="store_true", help="install the CRD without its CEL rules")
    parser.add_argument("--without-template-schema", action="store_true",
                        help="install the CRD with the replicas' pod templates unchecked (preserve-unknown-fields)")
    args = parser.parse_args(argv)
    if args.without_template_schema and not args.without_cel:
        parser.error("--without-template-schema needs --without-cel: the CRD's CEL rules read the templates' fields")
    with ControlPlane(scheduler=False) as plane:
        described = plane.describe()
        print(f"control plane: {described}", flush=True)
        costs = asyncio.run(measure(plane, args.requests, cel=not args.without_cel,
                                    template_schema=not args.without_template_schema))
    print(json.dumps({"requests_per_kind": args.requests, "in_flight": IN_FLIGHT, "cel": not args.without_cel,
                      "template_schema": not args.without_template_schema, "control_plane": described,
                      "costs": costs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
