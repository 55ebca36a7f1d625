{{- define "mpiop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mpiop.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mpiop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mpiop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mpiop.labels" -}}
{{ include "mpiop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "mpiop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mpiop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Exactly the verbs mpiop uses; keep in step with deploy/base/rbac.yaml (a test compares them). */}}
{{- define "mpiop.rules" -}}
- apiGroups: [kubeflow.org]
  resources: [mpijobs]
  verbs: [list, watch, delete, patch]
- apiGroups: [kubeflow.org]
  resources: [mpijobs/status]
  verbs: [patch]
# For the OwnerReferencesPermissionEnforcement admission plugin (owned objects block owner deletion).
- apiGroups: [kubeflow.org]
  resources: [mpijobs/finalizers]
  verbs: [update]
# deletecollection: a finished job's pods (cleanPodPolicy) and a restart's attempt go in one request, selected
# by the job's labels (and phase), when that matches exactly the pods to delete.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete, deletecollection]
# The last lines of a failed container's log, for the failure's condition message and Event.
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- if eq .Values.watchNamespace "" }}
# The status endpoint: whose is the token a pod posts its progress with (a TokenReview, audience mpiop.kubeflow.org).
# Cluster-scoped: under watchNamespace the endpoint is off (--no-status-endpoint).
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
# When an attempt fails, whether its pods' nodes are NotReady or deleted (then excluded); GPU nodes' shapes, to lay
# out jobs that state their total GPUs (spec.gpus). Cluster-scoped: a namespaced Role cannot grant it, so under
# watchNamespace nodes are not read (--no-gpu-layout) and only pod conditions count.
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
# Total-GPU mode through DRA (spec.gpuDeviceClassName): each node's GPUs are the devices of the job's DeviceClass its
# ResourceSlices publish (cluster-scoped too: not under watchNamespace).
- apiGroups: [resource.k8s.io]
  resources: [resourceslices, deviceclasses]
  verbs: [list, watch]
# A worker evicted by a DeviceTaintRule (an admin's taint on devices): the rules name the device (cluster-scoped).
- apiGroups: [resource.k8s.io]
  resources: [devicetaintrules]
  verbs: [list]
{{- end }}
# configmaps: the hostfile is patched; all three: labelled when a job is taken over from kubeflow's operator.
- apiGroups: [""]
  resources: [configmaps, secrets, services]
  verbs: [list, watch, create, patch]
# A failed attempt's logs (ConfigMap <job>-attempt-<n>): those past --kept-attempts are deleted.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [delete]
# kubeflow/mpi-operator's launcher Jobs of jobs taken over.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, delete]
# Exec launch: each such job's launcher ServiceAccount, Role and RoleBinding, followed like its other objects.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [list, watch]
# ResourceClaimTemplates: the GPUs (slots) of workers that claim them through DRA (--gpu-device-classes);
# create: the <job>-gpus template of a job laid out through DRA (spec.gpuDeviceClassName); get: one made before the
# job that names it, read by name (only the templates jobs name are kept).
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [get, list, watch, create]
# A worker evicted for a NoExecute taint on one of its DRA devices: its ResourceClaims (one list of its namespace's),
# its node's ResourceSlices and the DeviceTaintRules (cluster-wide only, above) say which device was tainted how
# (status.nodeExclusions).
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims]
  verbs: [list]
{{- if and .Values.statusEndpoint.enabled (eq .Values.watchNamespace "") }}
# The GPU layout webhook (served beside the status endpoint): the leader writes its CA into the webhook's caBundle.
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations]
  resourceNames: [{{ include "mpiop.fullname" . }}-gpu-layout]
  verbs: [get, patch]
{{- end }}
# patch: a repeated Event bumps the count of the one already made (client-go's event correlator).
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if .Values.execLaunch.enabled }}
{{- include "mpiop.execLaunchRules" . | nindent 0 }}
{{- end }}
{{- with .Values.gangScheduling }}
# Gang scheduling: each job's PodGroup (created before its pods, patched as Worker.replicas changes, deleted
# when suspended or finished; kubernetes: one per attempt, the previous attempt's deleted).
- apiGroups: [{{ if eq . "volcano" }}scheduling.volcano.sh{{ else if eq . "kubernetes" }}scheduling.k8s.io{{ else }}scheduling.x-k8s.io{{ end }}]
  resources: [podgroups]
  verbs: [list, watch, create, patch, delete]
{{- end }}
{{- end }}

{{/*
Exec launch (execLaunch.enabled; the same rules as deploy/overlays/exec-launch). Each exec job gets a
ServiceAccount, a Role (patched when a new attempt renames the pods it names) and a RoleBinding. RBAC lets mpiop
create a Role only with rights it holds itself, or with the escalate and bind verbs, which would let it grant
anything: holding the launchers' two rights (get pods, create/get pods/exec) is the narrower (docs/security.md).
*/}}
{{- define "mpiop.execLaunchRules" -}}
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles]
  verbs: [create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings]
  verbs: [create]
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
{{- end }}
