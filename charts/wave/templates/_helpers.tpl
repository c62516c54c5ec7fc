{{- define "wave.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wave.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "wave.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "wave.image" -}}
{{- $repository := .Values.image.name | default .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "wave.labels" -}}
app.kubernetes.io/name: {{ include "wave.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "wave.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wave.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wave.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "wave.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The rules wave needs on watched objects: least privilege, see docs/install.md. */}}
{{- define "wave.rules" -}}
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [get, list, watch]
{{- if .Values.rbac.legacyWaveCleanup }}
# --legacy-wave-cleanup: removing the owner references Wave v0.6 put on config (docs/migrating-from-wave.md).
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [patch]
{{- end }}
{{- if .Values.configHistory.enabled }}
# Config history: snapshots created and owned by revisions; config restored on undo (docs/history.md).
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [replicasets, controllerrevisions]
  verbs: [list]
{{- end }}
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, list, watch, patch]
{{- if .Values.cronJobs.enabled }}
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch, patch]
{{- if .Values.reloader.compat }}
# A CronJob opted in through Reloader's annotations reloads by starting a Job, as Reloader does.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create]
{{- end }}
{{- end }}
{{- if and .Values.jobs.enabled .Values.reloader.compat }}
# A Job opted in through Reloader's annotations reloads by being deleted and created again.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
{{- end }}
{{- if and .Values.reloader.enableCSIIntegration .Values.reloader.compat }}
# --enable-csi-integration: what the Secrets Store CSI driver mounted for each pod (versions, no values),
# and the classes' annotations (`ignore`, `match`; wave requests their metadata only).
- apiGroups: [secrets-store.csi.x-k8s.io]
  resources: [secretproviderclasspodstatuses, secretproviderclasses]
  verbs: [list, watch]
{{- end }}
{{- if .Values.argoRollouts.enabled }}
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [get, list, watch, patch]
{{- end }}
{{- range .Values.workloadResources }}
- apiGroups: [{{ .group | quote }}]
  resources: [{{ .resource }}]
  verbs: [get, list, watch, patch]
{{- end }}
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
{{- if .Values.namespaceSelector }}
# --namespace-selector: the namespaces' labels, followed live.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}
{{- if include "wave.webhookEnabled" . }}
# Pods held by the released scheduling gate, which StatefulSets and DaemonSets never replace.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, delete]
{{- end }}
{{- if .Values.inPlace.enabled }}
# Restarting in place: reading a workload's pods, and asking one to restart (an annotation).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, patch]
{{- end }}
{{- end -}}

{{- define "wave.webhookSecretName" -}}
{{ include "wave.fullname" . }}-webhook-tls
{{- end -}}

{{- define "wave.webhookTokenSecretName" -}}
{{ include "wave.fullname" . }}-webhook-token
{{- end -}}

{{- define "wave.webhookServiceName" -}}
{{ include "wave.fullname" . }}-webhook
{{- end -}}

{{- define "wave.leaderElection" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ else }}false{{ end -}}
{{- end -}}

{{/* Wave's chart keys, accepted with a deprecation line in NOTES.txt (docs/migrating-from-wave.md). */}}
{{- define "wave.webhookEnabled" -}}
{{- if or .Values.webhook.enabled .Values.webhooks.enabled }}true{{ end -}}
{{- end -}}

{{- define "wave.rbacCreate" -}}
{{- if and .Values.rbac.create (dig "rbac" "enabled" true (.Values.global | default dict)) }}true{{ end -}}
{{- end -}}

{{- define "wave.imagePullSecrets" -}}
{{- concat (.Values.imagePullSecrets | default list) (dig "imagePullSecrets" list (.Values.global | default dict)) | toYaml -}}
{{- end -}}

{{- define "wave.podAnnotations" -}}
{{- merge (dict) (.Values.podAnnotations | default dict) (.Values.annotations | default dict) | toYaml -}}
{{- end -}}
