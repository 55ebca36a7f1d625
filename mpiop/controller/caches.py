"""The informers mpiop runs and the cached shapes they keep: MPIJobs whole (up to --max-mpijob-kib), owned kinds
trimmed.

Owned kinds are selected by kubeflow's operator-name label, kept only if an MPIJob controls them under one of its
names (acceptance.py: a label anyone may write), and indexed by their owning job, so a reconcile reads one job's
objects without scanning. Objects of an earlier job of the same name (not yet
garbage-collected) are told apart by the owner's uid and never adopted.

batch/v1 Jobs are watched only for jobs kubeflow/mpi-operator started (its launcher `Job`, labelled `app`
only): like every owned kind, Jobs no MPIJob controls are dropped before they reach the cache. The launcher Job's
pods are controlled by the Job, not the MPIJob; kubeflow labels them with the job's name, which routes them here.

ResourceClaimTemplates (with --gpu-device-classes) are usually a tenant's own, with no selector that tells them
apart: only those a cached MPIJob names are kept (kube/wanted.py), as the MPIJob informer's CLAIM_TEMPLATE_INDEX
gets or loses a value; one made before the job that names it is fetched by name when the job is cached, and a
reconcile of that job waits for the fetch (claim_templates_fetched), so "missing" means it does not exist.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mpiop import names, podstate
from mpiop.api.raw import JSON
from mpiop.api.v2beta1 import KIND, MPIJob
from mpiop.controller import acceptance
from mpiop.controller.gone_pods import DisruptedGone
from mpiop.controller.trims import (
    ConfigMapShape,
    PodShape,
    has_extended_resources,
    trim_claim_template,
    trim_config_map,
    trim_device_class,
    trim_launcher_batch_job,
    trim_metadata_only,
    trim_mpijob,
    trim_node,
    trim_pod,
    trim_pod_group,
    trim_resource_slice,
    trim_role,
    trim_secret,
    trim_service,
)
from mpiop.desired import gpu_claims, gpus, podgroup
from mpiop.desired.podgroup import GangScheduler
from mpiop.desired.settings import DEFAULT_SETTINGS
from mpiop.kube.client import (
    BATCH_JOBS,
    CONFIGMAPS,
    DEVICE_CLASSES,
    MPIJOBS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    ApiError,
    KubeClient,
    Resource,
)
from mpiop.kube.informer import Indexer, Informer, object_key
from mpiop.kube.wanted import WantedInformer
from mpiop.plan import Observed, Refusal
from mpiop.policies import gpu_layout

OWNER_INDEX = "owner"
# Pods by `namespace/<job-name label>`, whoever owns them: what a DELETE collection by the job's labels matches.
JOB_LABEL_INDEX = "job-label"
# MPIJobs by the `namespace/name` of each ResourceClaimTemplate their pod templates' claims are made from, and (a job
# stating spec.gpus) of the job's own `<job>-gpus` (desired.gpu_claims): the templates the claim template informer
# keeps (kube/wanted.py), none else.
CLAIM_TEMPLATE_INDEX = "claim-template"


def owner_key(obj: JSON) -> str | None:
    """`namespace/name` of the MPIJob that controls this object (or, for a pod of kubeflow's launcher Job,
    that the Job runs for), if one does."""
    meta = obj["metadata"]
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == KIND:
            return f"{meta.get('namespace')}/{ref.get('name')}"
    job_name = (meta.get("labels") or {}).get(names.JOB_NAME_LABEL)
    if job_name and any(r.get("kind") == "Job" and r.get("controller") for r in refs):
        return f"{meta.get('namespace')}/{job_name}"
    return None


def _controlled_by_batch_job(obj: JSON) -> bool:
    return any(r.get("kind") == "Job" for r in obj["metadata"].get("ownerReferences") or [])


def _owner_uid(obj: JSON) -> str | None:
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == KIND), None)


def _by_job_label(obj: JSON) -> Iterable[str]:
    job_name = (obj["metadata"].get("labels") or {}).get(names.JOB_NAME_LABEL)
    return [f"{obj['metadata'].get('namespace')}/{job_name}"] if job_name else []


def _by_claim_template(obj: JSON) -> Iterable[str]:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    namespace = meta.get("namespace")
    replicas = (spec.get("mpiReplicaSpecs") or {}).values()
    named = {f"{namespace}/{n}" for r in replicas if isinstance(r, dict)
             for n in gpus.claim_template_names(r.get("template") or {})}
    if spec.get("gpus") is not None and meta.get("name"):
        named.add(f"{namespace}/{gpu_claims.template_name_for(str(meta['name']))}")
    return named


def _by_owner(obj: JSON) -> Iterable[str]:
    key = owner_key(obj)
    return [key] if key else []


# Whether an update of a cached (trimmed) object changes nothing a decision reads: then no reconcile is queued.
UnchangedFilter = Callable[[JSON, JSON], bool]


def _unversioned(obj: JSON, **metadata: Any) -> JSON:
    """The object as a comparison sees it: no resourceVersion, and `metadata`'s fields in place of its own."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": None, **metadata}}


def same_but_version(old: JSON, new: JSON) -> bool:
    """Every owned kind but pods: any change of what the trim keeps (a PodGroup's spec too) is news."""
    return _unversioned(old) == _unversioned(new)


def same_mpijob_but_progress(old: JSON, new: JSON) -> bool:
    """A progress report once the attempt's first was recorded (status.firstProgressTime) decides nothing now:
    the stall deadline it pushes back is checked when the job's own timer (Plan.requeue_in) fires. Queuing a
    reconcile for each of them (1,000 reporting jobs: ~100 writes a second) starved every other job's."""
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    if not (new_status.get("firstProgressTime") and old_status.get("trainerStatus")
            and new_status.get("trainerStatus")):
        return False

    def unreported(obj: JSON, status: JSON) -> JSON:
        return {**_unversioned(obj), "status": {k: v for k, v in status.items() if k != "trainerStatus"}}

    return unreported(old, old_status) == unreported(new, new_status)


def same_pod_but_binding_or_deletion_time(old: JSON, new: JSON) -> bool:
    """A pod bound to a node, or the time of a deletion already seen moved, decides nothing.

    Its node is kept for the failure report, which reads it only once the pod has failed (a change of its own).
    Decisions read only whether a pod is terminating (podstate.is_terminating), never when: the operator caches
    the pods it deleted as terminating at its own clock's time, the watch then brings the apiserver's (now plus
    the grace period) and the kubelet's final one; each queued a pass of a finished job that did nothing.
    """
    def unbound(obj: JSON) -> JSON:
        spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"}
        return {**_unversioned(obj, deletionTimestamp=bool(obj["metadata"].get("deletionTimestamp"))), "spec": spec}

    return unbound(old) == unbound(new)


def pod_finished_now(old: JSON | None, new: JSON | None) -> bool:
    """A pod that has just succeeded or failed: its job finishes, or restarts, at once rather than after the pod
    event batch (a launcher's end to the job's Succeeded is a latency users watch, bench's status latency)."""
    return new is not None and podstate.phase(new) in ("Succeeded", "Failed") and (
        old is None or podstate.phase(old) != podstate.phase(new))


def pod_group_resource(scheduler: GangScheduler) -> Resource:
    return Resource(scheduler.group, scheduler.version, podgroup.PLURAL, podgroup.KIND)


async def pod_group_api_missing(client: KubeClient, scheduler: GangScheduler) -> str | None:
    """Why PodGroups of the chosen gang scheduler cannot be used (its CRD, or Kubernetes' own API, is not served), or
    None.

    Asked through discovery, which every authenticated client may read: no permission on CRDs is needed.
    """
    resource = pod_group_resource(scheduler)
    try:
        served = await client.request("GET", f"/apis/{resource.group}/{resource.version}")
    except ApiError as error:
        if not error.not_found:
            raise
        served = {}
    if any(r.get("name") == resource.plural for r in served.get("resources") or []):
        return None
    if scheduler.kubernetes:
        return (f"--gang-scheduling kubernetes needs PodGroups of {resource.api_version}, and the apiserver does not "
                f"serve them: Kubernetes v1.37 or later serves them with the GenericWorkload feature gate on "
                f"(--feature-gates=GenericWorkload=true on kube-apiserver, kube-scheduler, whose GangScheduling "
                f"plugin places them, and kube-controller-manager) and the API group enabled "
                f"(kube-apiserver --runtime-config={resource.group}/{resource.version}=true)")
    return (f"--gang-scheduling {scheduler.scheduler_name} needs PodGroups of {resource.api_version}, and the "
            f"apiserver does not serve them: install the CustomResourceDefinition {scheduler.crd_name} "
            f"({'Volcano' if scheduler.volcano else 'scheduler-plugins'}) first")


@dataclass
class Caches:
    mpijobs: Informer
    pods: Informer
    config_maps: Informer
    secrets: Informer
    services: Informer
    launcher_batch_jobs: Informer
    # Exec launch (desired.launcher_rbac): each such job's launcher ServiceAccount, Role and RoleBinding.
    service_accounts: Informer
    roles: Informer
    role_bindings: Informer
    # Gang scheduling only. Not label-selected (kubeflow's PodGroups carry no labels): those an MPIJob controls.
    pod_groups: Informer | None = None
    # Nodes with extended resources, for total-GPU jobs (policies/gpu_layout); None under --no-gpu-layout.
    nodes: Informer | None = None
    # ResourceClaimTemplates, for the slots of workers whose GPUs come through DRA claims (policies/gpu_slots); None
    # under an empty --gpu-device-classes, or when the role or the apiserver does not allow them (Manager.run).
    # Only the templates some cached MPIJob names (CLAIM_TEMPLATE_INDEX, kube/wanted.py): not a tenant's others.
    claim_templates: WantedInformer | None = None
    # Total-GPU mode through DRA (policies/gpu_layout, dra_inventory): ResourceSlices and DeviceClasses, trimmed to
    # devices counted by driver and type; on with both of the above, off (None) with either or when Manager.run finds
    # them not listable. While on, the Node informer keeps every node, not only those with an extended resource: a
    # DRA node's GPUs are in its slices, not its allocatable.
    resource_slices: Informer | None = None
    device_classes: Informer | None = None
    # Pods deleted with a DisruptionTarget that went before a pass saw them going (gone_pods), fed by the pod informer.
    disrupted_gone: DisruptedGone = field(default_factory=DisruptedGone)

    @classmethod
    def build(cls, client: KubeClient, namespace: str | None, watch_timeout_seconds: int = 300,
               on_watch_restart: Callable[[str], None] | None = None,
               gang_scheduler: GangScheduler | None = None, watch_nodes: bool = True,
               watch_claim_templates: bool = True,
               max_mpijob_bytes: int = DEFAULT_SETTINGS.max_mpijob_kib * 1024) -> Caches:
        def owned(resource: Any, trim: Callable[[JSON], JSON], shape: type[Any] | None = None,
                  **more: Indexer) -> Informer:
            return Informer(client, resource, namespace, label_selector=names.OWNED_SELECTOR, trim=trim,
                            accept=acceptance.accepts(resource.kind), indexers={OWNER_INDEX: _by_owner, **more},
                            watch_timeout_seconds=watch_timeout_seconds, on_watch_restart=on_watch_restart, shape=shape)

        def cluster_wide(resource: Resource, trim: Callable[[JSON], JSON]) -> Informer:
            return Informer(client, resource, None, trim=trim, watch_timeout_seconds=watch_timeout_seconds,
                            on_watch_restart=on_watch_restart)

        dra = watch_nodes and watch_claim_templates
        caches = cls(
            mpijobs=Informer(client, MPIJOBS, namespace,
                             trim=functools.partial(trim_mpijob, max_bytes=max_mpijob_bytes),
                             indexers={CLAIM_TEMPLATE_INDEX: _by_claim_template},
                             watch_timeout_seconds=watch_timeout_seconds, on_watch_restart=on_watch_restart),
            pods=owned(PODS, trim_pod, PodShape, **{JOB_LABEL_INDEX: _by_job_label}),
            config_maps=owned(CONFIGMAPS, trim_config_map, ConfigMapShape),
            secrets=owned(SECRETS, trim_secret),
            services=owned(SERVICES, trim_service),
            service_accounts=owned(SERVICE_ACCOUNTS, trim_metadata_only),
            roles=owned(ROLES, trim_role),
            role_bindings=owned(ROLE_BINDINGS, trim_metadata_only),
            # kubeflow labels its launcher Job `app: <job>` only.
            launcher_batch_jobs=Informer(client, BATCH_JOBS, namespace, label_selector=names.APP_LABEL,
                                         trim=trim_launcher_batch_job, accept=acceptance.accepts("Job"),
                                         indexers={OWNER_INDEX: _by_owner}, watch_timeout_seconds=watch_timeout_seconds,
                                         on_watch_restart=on_watch_restart),
            pod_groups=None if gang_scheduler is None else Informer(
                client, pod_group_resource(gang_scheduler), namespace, trim=trim_pod_group,
                accept=acceptance.accepts(podgroup.KIND), indexers={OWNER_INDEX: _by_owner},
                watch_timeout_seconds=watch_timeout_seconds, on_watch_restart=on_watch_restart),
            nodes=Informer(client, NODES, None, trim=trim_node, accept=has_extended_resources,
                           watch_timeout_seconds=watch_timeout_seconds,
                           on_watch_restart=on_watch_restart) if watch_nodes else None,
            claim_templates=WantedInformer(client, RESOURCE_CLAIM_TEMPLATES, namespace, trim=trim_claim_template,
                                           watch_timeout_seconds=watch_timeout_seconds,
                                           on_watch_restart=on_watch_restart) if watch_claim_templates else None,
            resource_slices=cluster_wide(RESOURCE_SLICES, trim_resource_slice) if dra else None,
            device_classes=cluster_wide(DEVICE_CLASSES, trim_device_class) if dra else None,
        )
        caches.pods.handlers.append(caches.disrupted_gone.note)
        if caches.nodes is not None:
            caches.nodes.accept = caches.keeps_node
        if caches.claim_templates is not None:
            caches.claim_templates.after = caches.mpijobs.synced  # its first list knows which templates to keep
            caches.mpijobs.on_index_change = caches._claim_template_named
        return caches

    def _claim_template_named(self, index: str, key: str, named: bool) -> None:
        """A ResourceClaimTemplate key the first cached job names, or the last stopped naming: kept, or dropped."""
        if index != CLAIM_TEMPLATE_INDEX or self.claim_templates is None:
            return
        if named:
            self.claim_templates.want(key)
        else:
            self.claim_templates.unwant(key)

    async def claim_templates_fetched(self, job: MPIJob) -> None:
        """Once the job's templates being fetched (named by a job only now, made before it) are in or known absent."""
        if self.claim_templates is not None:
            namespace = job.metadata.namespace
            await self.claim_templates.fetched(f"{namespace}/{n}" for n in gpus.job_claim_template_names(job))

    def keeps_node(self, node: JSON) -> bool:
        """A node with an extended resource; while ResourceSlices are watched, every node."""
        return self.resource_slices is not None or has_extended_resources(node)

    def dra(self) -> gpu_layout.Dra:
        """The cached ResourceSlices and DeviceClasses (by name), None when not watched (or not listed yet)."""
        if self.resource_slices is None or self.device_classes is None or not (
                self.resource_slices.synced.is_set() and self.device_classes.synced.is_set()):
            return gpu_layout.Dra()
        return gpu_layout.Dra(list(self.resource_slices.cached_objects()),
                              {c["metadata"]["name"]: c for c in self.device_classes.cached_objects()})

    def all(self) -> list[Informer]:
        return [self.mpijobs, *self.owned(), *(i for i in (self.nodes, self.claim_templates, self.resource_slices,
                                                            self.device_classes) if i is not None)]

    def node_list(self) -> list[JSON] | None:
        """The cached GPU nodes, or None when nodes are not watched (or not listed yet)."""
        if self.nodes is None or not self.nodes.synced.is_set():
            return None
        return list(self.nodes.cached_objects())

    def owned(self) -> list[Informer]:
        extra = [self.pod_groups] if self.pod_groups is not None else []
        return [self.pods, self.config_maps, self.secrets, self.services, self.launcher_batch_jobs,
                self.service_accounts, self.roles, self.role_bindings, *extra]

    def owned_filters(self) -> list[tuple[Informer, UnchangedFilter]]:
        """Each owned kind's informer with the filter for its trim: which updates need no reconcile."""
        return [(self.pods, same_pod_but_binding_or_deletion_time),
                *((i, same_but_version) for i in self.owned() if i is not self.pods)]

    def observed(self, job: MPIJob, refused: list[Refusal] | None = None) -> Observed:
        """The job's cached objects (those of its uid), with what the apiserver refused in the last pass."""
        def mine(informer: Informer) -> list[JSON]:
            return [o for o in informer.by_index(OWNER_INDEX, job.key) if _owner_uid(o) == job.metadata.uid]

        def one(informer: Informer, name: str) -> JSON | None:
            return next((o for o in mine(informer) if o["metadata"]["name"] == name), None)

        return Observed(
            pods=mine(self.pods),
            disrupted_gone=self.disrupted_gone.of(job),
            config_map=one(self.config_maps, names.config_map_name(job)),
            attempt_config_maps=[m for m in mine(self.config_maps)
                                 if names.ATTEMPT_LABEL in (m["metadata"].get("labels") or {})],
            secret=one(self.secrets, names.ssh_secret_name(job)),
            service=one(self.services, names.service_name(job)),
            launcher_batch_job=one(self.launcher_batch_jobs, names.launcher_name(job)),
            launcher_batch_job_pods=[p for p in self.pods.by_index(OWNER_INDEX, job.key)
                                     if _controlled_by_batch_job(p)],
            service_account=one(self.service_accounts, names.launcher_account_name(job)),
            role=one(self.roles, names.launcher_account_name(job)),
            role_binding=one(self.role_bindings, names.launcher_account_name(job)),
            legacy_role=one(self.roles, names.legacy_launcher_account_name(job)),
            pod_groups=mine(self.pod_groups) if self.pod_groups is not None else [],
            refused=refused or [],
            claim_templates=self.claim_templates_of(job),
        )

    def claim_templates_of(self, job: MPIJob) -> dict[str, JSON] | None:
        """The cached ResourceClaimTemplates the job's claims are made from, by name; None: not watched."""
        if self.claim_templates is None:
            return None
        namespace = job.metadata.namespace
        return {n: t for n in sorted(gpus.job_claim_template_names(job))
                if (t := self.claim_templates.get(f"{namespace}/{n}")) is not None}

    def jobs_naming(self, template: JSON) -> list[str]:
        """The keys of the MPIJobs whose claims are made from this ResourceClaimTemplate."""
        meta = template["metadata"]
        return [object_key(j) for j in self.mpijobs.by_index(CLAIM_TEMPLATE_INDEX,
                                                             f"{meta.get('namespace')}/{meta.get('name')}")]

    def labelled_pods(self, job: MPIJob) -> list[JSON]:
        """Every cached pod carrying this job's name label, whoever controls it."""
        return self.pods.by_index(JOB_LABEL_INDEX, job.key)

    def informer_for(self, kind: str) -> Informer:
        informers = {"Pod": self.pods, "ConfigMap": self.config_maps, "Secret": self.secrets,
                     "Service": self.services, "Job": self.launcher_batch_jobs, KIND: self.mpijobs,
                     "ServiceAccount": self.service_accounts, "Role": self.roles, "RoleBinding": self.role_bindings}
        if self.pod_groups is not None:
            informers[podgroup.KIND] = self.pod_groups
        if self.claim_templates is not None:  # total-GPU mode through DRA: a job's own template (desired.gpu_claims)
            informers[RESOURCE_CLAIM_TEMPLATES.kind] = self.claim_templates
        return informers[kind]
