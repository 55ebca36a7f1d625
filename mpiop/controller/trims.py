"""The trims: what the informers keep of each kind, only the fields decisions read (docs/architecture.md,
"trimmed"). Each trimmed shape is a TypedDict, so mypy checks every key a trim writes; the informer stores it
as the plain JSON it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Required, TypedDict, cast

import orjson

from mpiop import names, podsnapshot, podstate
from mpiop.api.raw import JSON, TrimmedMetadata
from mpiop.desired import kubexec, podgroup, ssh_config, status_report
from mpiop.kube.trim import MetadataShape, shared
from mpiop.kube.trim import metadata as trimmed_metadata
from mpiop.plan import MESSAGE_LIMIT
from mpiop.podsnapshot import (
    ContainerRun,
    ContainerStatus,
    PodCondition,
    PodSpec,
    PodStatus,
    TerminatedRun,
    TrimmedPodBody,
)
from mpiop.policies import cached_size, dra_inventory

# The labels decisions read of an owned object (names.py): any other a tenant writes on its job's objects (pods
# carry their template's) is not kept. Label keys and values are bounded by the apiserver; their number is not.
READ_LABELS = frozenset({names.OPERATOR_NAME_LABEL, names.JOB_NAME_LABEL, names.JOB_ROLE_LABEL,
                         names.REPLICA_INDEX_LABEL, names.APP_LABEL, names.ATTEMPT_LABEL,
                         names.LAUNCHED_WORKERS_LABEL, names.REPLACEMENT_LABEL, names.SSH_PORT_LABEL,
                         names.MASTER_PORT_LABEL})


def owned_metadata(obj: JSON) -> TrimmedMetadata:
    """What an owned kind's trim keeps of the metadata: kube.trim's, with only the READ_LABELS."""
    return trimmed_metadata(obj, READ_LABELS)


# The keys of the hostfile ConfigMap mpiop writes (desired.objects.config_map_data).
OWN_KEYS = frozenset({names.HOSTFILE_NAME, names.DISCOVER_HOSTS_NAME, ssh_config.NAME, kubexec.SCRIPT_NAME,
                      status_report.CA_KEY})

_KEPT_POD_STATUS: tuple[Literal["phase", "reason", "message"], ...] = ("phase", "reason", "message")


class _PodConditionShape(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any
    message: Any


class _WaitingShape(TypedDict, total=False):
    reason: Any
    message: Any


class _TerminatedShape(TypedDict, total=False):
    exitCode: Any
    reason: Any
    message: Any


class _ContainerRunShape(TypedDict, total=False):
    waiting: _WaitingShape
    terminated: _TerminatedShape


class _ContainerStatusShape(TypedDict, total=False):
    name: Any
    restartCount: Any
    state: _ContainerRunShape
    lastState: _ContainerRunShape


class _PodStatusShape(TypedDict, total=False):
    phase: Any
    reason: Any
    message: Any
    conditions: list[_PodConditionShape]
    initContainerStatuses: list[_ContainerStatusShape]
    containerStatuses: list[_ContainerStatusShape]


class _PodSpecShape(TypedDict, total=False):
    nodeName: Any
    restartPolicy: Any


class PodShape(TypedDict, total=False):
    """Every field `trim_pod` (and the pod informer's indexers) reads: what the pod informer decodes of a pod
    (codec.Shaped), a few hundred bytes of its several KiB. A field read here must be in it (tests/unit/test_trim_pod
    checks the trim of the shape is the trim of the whole)."""

    apiVersion: Any
    kind: Any
    metadata: MetadataShape
    status: _PodStatusShape
    spec: _PodSpecShape


def trim_pod(pod: JSON) -> JSON:
    """What the controller decides on (what `podstate` reads), with its `podsnapshot.State`; everything else in a
    Pod is dropped from the cache. The shape is podsnapshot.TrimmedPodBody's: mypy checks every key written."""
    status = pod.get("status", {})
    kept_status: PodStatus = {}
    for key in _KEPT_POD_STATUS:
        if key in status:
            kept_status[key] = status[key]
    if "phase" in kept_status:
        kept_status["phase"] = shared(kept_status["phase"])
    conditions: list[PodCondition] = [{"type": "Ready", "status": shared(c.get("status"))}
                                      for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    # Why the scheduler cannot place it: a host-port conflict moves the pod to another port, and a gang
    # held back says so on its MPIJob (policies/gang).
    conditions += [{"type": "PodScheduled", "status": "False", "message": c.get("message") or ""}
                   for c in status.get("conditions") or []
                   if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    # Evicted, preempted or deleted from a failing node: a restart that spends no backoffLimit (policies/disruption).
    conditions += [{"type": podstate.DISRUPTION_TARGET, "status": "True", "reason": c.get("reason") or "",
                    "message": str(c.get("message") or "")[:podstate.DISRUPTION_MESSAGE_KEPT]}
                   for c in status.get("conditions") or []
                   if c.get("type") == podstate.DISRUPTION_TARGET and c.get("status") == "True"]
    if conditions:  # only then: other conditions coming and going change nothing here
        kept_status["conditions"] = conditions
    if status.get("initContainerStatuses"):
        kept_status["initContainerStatuses"] = [_slim_container(s) for s in status["initContainerStatuses"]]
    if status.get("containerStatuses"):
        kept_status["containerStatuses"] = [_slim_container(s) for s in status["containerStatuses"]]
    trimmed: TrimmedPodBody = {"metadata": owned_metadata(pod), "status": kept_status}
    spec = pod.get("spec") or {}
    kept_spec: PodSpec = {}
    if spec.get("nodeName"):
        kept_spec["nodeName"] = shared(spec["nodeName"])
    if spec.get("restartPolicy") == "OnFailure":  # the one policy decisions read (in_place_failures)
        kept_spec["restartPolicy"] = "OnFailure"
    if kept_spec:
        trimmed["spec"] = kept_spec
    return podsnapshot.with_state(trimmed)


def _slim_container(status: JSON) -> ContainerStatus:
    """Name, how its runs ended, and the restart count only once it is not 0 (a pod's ordinary life then
    changes nothing here)."""
    kept: ContainerStatus = {"name": shared(status.get("name")), "state": _slim_state(status.get("state")),
                             "lastState": _slim_state(status.get("lastState"))}
    if status.get("restartCount"):
        kept["restartCount"] = int(status["restartCount"])
    return kept


def _slim_state(state: Any) -> ContainerRun:
    """A terminated run's exit; of waiting, only CrashLoopBackOff (a failed run that waits to run again) and an
    image the kubelet cannot get (with its message, which names the image and what the registry said)."""
    if not isinstance(state, dict):
        return {}
    waiting = state.get("waiting") or {}
    if waiting.get("reason") == podstate.CRASH_LOOP:
        return {"waiting": {"reason": podstate.CRASH_LOOP}}
    if waiting.get("reason") in podstate.IMAGE_PULL_FAILURES:
        return {"waiting": {"reason": waiting["reason"],
                            "message": str(waiting.get("message") or "")[-podstate.TERMINATION_MESSAGE_KEPT:]}}
    if "terminated" not in state:
        return {}
    terminated = state["terminated"] or {}
    kept: TerminatedRun = {}
    if "exitCode" in terminated:
        kept["exitCode"] = terminated["exitCode"]
    if "reason" in terminated:
        kept["reason"] = terminated["reason"]
    if terminated.get("message") and terminated.get("exitCode"):
        kept["message"] = str(terminated["message"])[-podstate.TERMINATION_MESSAGE_KEPT:]
    return {"terminated": kept}


class TrimmedConfigMap(TypedDict, total=False):
    metadata: Required[TrimmedMetadata]
    data: dict[str, str]  # the hostfile ConfigMap's (trim_config_map); not kept of a saved attempt's


class TrimmedMetadataOnly(TypedDict):
    metadata: TrimmedMetadata


class TrimmedRole(TypedDict):
    metadata: TrimmedMetadata
    rules: list[JSON]


class Condition(TypedDict, total=False):
    type: str
    status: str | None
    reason: str | None
    message: str | None


class PodGroupStatus(TypedDict, total=False):
    phase: str | None
    conditions: list[Condition]


class TrimmedPodGroup(TypedDict):
    metadata: TrimmedMetadata
    spec: JSON
    status: PodGroupStatus


def _cached(trimmed: Mapping[str, object]) -> JSON:
    """A trimmed object as the informer stores it: plain JSON once its keys were checked."""
    return cast(JSON, trimmed)


def trim_secret(obj: JSON) -> JSON:
    """Existence only: private keys never sit in the operator's memory (nor a type nobody reads)."""
    return trim_metadata_only(obj)


# The data keys ConfigMapShape decodes: OWN_KEYS (keys with dots and dashes: the functional form).
_OwnData = TypedDict("_OwnData", dict.fromkeys(sorted(OWN_KEYS), Any), total=False)  # type: ignore[misc]


class ConfigMapShape(TypedDict, total=False):
    """What the ConfigMap informer decodes of a watched ConfigMap (codec.Shaped): of its data only OWN_KEYS, the rest
    skipped unread (a tenant's 700 KB of small keys would be ~14,000 strings, and a saved attempt's logs are never
    read back)."""

    apiVersion: Any
    kind: Any
    metadata: MetadataShape
    data: _OwnData


def trim_config_map(obj: JSON) -> JSON:
    """The hostfile ConfigMap's data of the keys mpiop writes (OWN_KEYS), which decisions read or compare; any other
    ConfigMap of the job (a saved attempt's logs, or one a namespace's writer made under an attempt's name with the
    job as its controller, any number of them) by name only.

    Any other key is its tenant's and no decision's: not kept (20 ConfigMaps of 700 KB of small keys grew the leader
    by 134 MB), nor compared with the data wanted, which a patch could not make equal (a merge keeps the keys it
    does not name)."""
    trimmed: TrimmedConfigMap = {"metadata": owned_metadata(obj)}
    controller: JSON = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), {})
    if obj["metadata"].get("name") == names.config_map_name_for(str(controller.get("name"))) \
            and names.ATTEMPT_LABEL not in (obj["metadata"].get("labels") or {}):
        trimmed["data"] = {k: v for k, v in (obj.get("data") or {}).items() if k in OWN_KEYS}
    return _cached(trimmed)


def trim_service(obj: JSON) -> JSON:
    """Existence only: no decision reads a Service's spec (mpiop makes it and never changes it)."""
    return trim_metadata_only(obj)


def trim_metadata_only(obj: JSON) -> JSON:
    """Existence only: an exec launcher's ServiceAccount and RoleBinding never change once made."""
    trimmed: TrimmedMetadataOnly = {"metadata": owned_metadata(obj)}
    return _cached(trimmed)


def trim_role(obj: JSON) -> JSON:
    trimmed: TrimmedRole = {"metadata": owned_metadata(obj), "rules": obj.get("rules") or []}
    return _cached(trimmed)


_CONDITION_KEYS: tuple[Literal["type", "status", "reason", "message"], ...] = ("type", "status", "reason", "message")


def _condition(condition: JSON) -> Condition:
    """The keys of a condition that it has."""
    kept: Condition = {}
    for key in _CONDITION_KEYS:
        if key in condition:
            kept[key] = condition[key]
    return kept


# The PodGroup conditions policies/gang reads: Volcano's, and Kubernetes' (scheduling.k8s.io/v1beta1).
_POD_GROUP_CONDITIONS = frozenset({"Unschedulable", podgroup.INITIALLY_SCHEDULED})


def trim_pod_group(obj: JSON) -> JSON:
    """The spec fields mpiop owns (compared to decide a patch) and the conditions that say why a gang waits, their
    message cut to what a job's condition quotes; not the rest (a v1beta1 group's claims, its priority)."""
    status = obj.get("status") or {}
    conditions = [_condition(c) for c in status.get("conditions") or [] if c.get("type") in _POD_GROUP_CONDITIONS]
    for condition in conditions:
        if isinstance(message := condition.get("message"), str):
            condition["message"] = message[:MESSAGE_LIMIT]
    spec = obj.get("spec") or {}
    trimmed: TrimmedPodGroup = {"metadata": owned_metadata(obj),
                                "spec": {k: spec[k] for k in podgroup.OWNED_SPEC_FIELDS if k in spec},
                                "status": {"phase": status.get("phase"), "conditions": conditions} if status else {}}
    return _cached(trimmed)


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # the whole manifest again: nobody here reads it
_CUT_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")


def trim_mpijob(obj: JSON, max_bytes: int) -> JSON:
    """MPIJobs are kept whole but for managedFields and kubectl's last-applied-configuration, which nobody here
    reads; one whose JSON is then over `max_bytes` (--max-mpijob-kib) only as failing it needs (policies/cached_size):
    identity, replica counts, runPolicy (its cleanPodPolicy) and status, marked with cached_size.CUT_ANNOTATION."""
    meta = obj.get("metadata", {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations") or {}
    annotations.pop(_LAST_APPLIED, None)
    annotations.pop(cached_size.CUT_ANNOTATION, None)  # the cache's own mark, never its tenant's
    size = len(orjson.dumps(obj))
    if size <= max_bytes:
        return obj
    spec = obj.get("spec") or {}
    replicas = spec.get("mpiReplicaSpecs") or {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {**{k: meta[k] for k in _CUT_METADATA if k in meta},
                         "annotations": {cached_size.CUT_ANNOTATION: str(size)}},
            "spec": {"mpiReplicaSpecs": {role: {"replicas": r.get("replicas")} for role, r in replicas.items()
                                         if isinstance(r, dict)},
                     **({"runPolicy": spec["runPolicy"]} if isinstance(spec.get("runPolicy"), dict) else {})},
            "status": obj.get("status") or {}}


class BatchJobStatus(TypedDict, total=False):
    active: int
    succeeded: int
    failed: int
    completionTime: str
    conditions: list[Condition]


class TrimmedBatchJob(TypedDict):
    metadata: TrimmedMetadata
    status: BatchJobStatus


_BATCH_JOB_COUNTS: tuple[Literal["active", "succeeded", "failed", "completionTime"], ...] = (
    "active", "succeeded", "failed", "completionTime")


def trim_launcher_batch_job(obj: JSON) -> JSON:
    """Whether kubeflow's launcher Job runs, succeeded or failed: its conditions and counts."""
    status = obj.get("status") or {}
    kept: BatchJobStatus = {}
    for key in _BATCH_JOB_COUNTS:
        if key in status:
            kept[key] = status[key]
    kept["conditions"] = [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason"),
                           "message": c.get("message")} for c in status.get("conditions") or []]
    trimmed: TrimmedBatchJob = {"metadata": owned_metadata(obj), "status": kept}
    return _cached(trimmed)


def _extended_resources(obj: JSON) -> JSON:
    """A node's allocatable extended resources (`<domain>/<name>`, not kubernetes.io's): its GPUs, MIG slices."""
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return {k: v for k, v in allocatable.items() if "/" in k and not k.split("/")[0].endswith("kubernetes.io")
            and str(v) not in ("0", "")}


def has_extended_resources(obj: JSON) -> bool:
    """Only nodes with GPUs (or another extended resource) are cached: a CPU cluster's nodes take no memory."""
    return bool(_extended_resources(obj))


def trim_node(obj: JSON) -> JSON:
    """What laying a job out reads: labels, taints, cordon, allocatable extended resources (not the heartbeats)."""
    spec = obj.get("spec") or {}
    kept_spec = {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)}
    return {"metadata": trimmed_metadata(obj), "spec": kept_spec,
            "status": {"allocatable": _extended_resources(obj)}}


_DEVICE_REQUEST_FIELDS = ("name", "deviceClassName", "allocationMode", "count", "adminAccess")


def _device_request(request: JSON) -> JSON:
    return {k: request[k] for k in _DEVICE_REQUEST_FIELDS if k in request}


def trim_claim_template(obj: JSON) -> JSON:
    """What a worker's slots read of a ResourceClaimTemplate (desired.gpus): each device request's name and, for
    `exactly` and each `firstAvailable` alternative, device class, allocation mode, count and admin access (not
    its selectors, constraints or configuration)."""
    requests = ((((obj.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests")) or []
    kept: list[JSON] = []
    for request in requests:
        one: JSON = {"name": request.get("name")}
        if request.get("exactly") is not None:
            one["exactly"] = _device_request(request["exactly"])
        if request.get("firstAvailable"):
            one["firstAvailable"] = [_device_request(a) for a in request["firstAvailable"]]
        kept.append(one)
    return {"metadata": trimmed_metadata(obj), "spec": {"spec": {"devices": {"requests": kept}}}}


def trim_resource_slice(obj: JSON) -> JSON:
    """What a node's GPUs through DRA read (policies/dra_inventory): its node, driver, pool (name, generation) and
    its devices counted by their `type` attribute, at most dra_inventory.TYPES_KEPT of them: a few hundred bytes,
    not the devices' attributes and capacities."""
    spec = obj.get("spec") or {}
    driver = str(spec.get("driver") or "")
    counts: dict[str, int] = {}
    for device in spec.get("devices") or []:
        kind = dra_inventory.device_type(device if isinstance(device, dict) else {}, driver)
        if kind not in counts and len(counts) >= dra_inventory.TYPES_KEPT:
            kind = dra_inventory.OTHER_TYPES
        counts[kind] = counts.get(kind, 0) + 1
    pool = spec.get("pool") or {}
    kept: JSON = {"driver": shared(driver), "devices": counts,
                  "pool": {"name": shared(str(pool.get("name") or "")), "generation": int(pool.get("generation") or 0)}}
    if spec.get("nodeName"):
        kept["nodeName"] = shared(str(spec["nodeName"]))
    return {"metadata": trimmed_metadata(obj), "spec": kept}


def trim_device_class(obj: JSON) -> JSON:
    """A DeviceClass as the devices it selects (driver and type), or why mpiop cannot tell: never its expressions."""
    found = dra_inventory.class_devices(str(obj["metadata"].get("name")), obj)
    devices: JSON = ({"refused": found} if isinstance(found, str) else
                     {"driver": found.driver, **({"type": found.type} if found.type is not None else {})})
    return {"metadata": trimmed_metadata(obj), "devices": devices}
