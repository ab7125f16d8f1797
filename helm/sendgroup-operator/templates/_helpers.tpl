{{/*
Names, labels and derived settings shared by the templates.
*/}}

{{/* The chart name (app.kubernetes.io/name). */}}
{{- define "sendgroup-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>" (or the release name when it already contains the chart name), <= 63. */}}
{{- define "sendgroup-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* helm.sh/chart label value. */}}
{{- define "sendgroup-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels of one component: name, instance, component.
Usage: include "sendgroup-operator.selectorLabels" (dict "ctx" $ "component" "operator")
*/}}
{{- define "sendgroup-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sendgroup-operator.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
All labels of an object of one component: the selector labels plus version, part-of,
managed-by and helm.sh/chart.
Usage: include "sendgroup-operator.labels" (dict "ctx" $ "component" "operator")
*/}}
{{- define "sendgroup-operator.labels" -}}
helm.sh/chart: {{ include "sendgroup-operator.chart" .ctx }}
{{ include "sendgroup-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: sendgroup-operator
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{/* The operator's ServiceAccount name. */}}
{{- define "sendgroup-operator.serviceAccountName" -}}
{{- default (include "sendgroup-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The workers' ServiceAccount name. */}}
{{- define "sendgroup-operator.workerServiceAccountName" -}}
{{- default (printf "%s-worker" (include "sendgroup-operator.fullname" .)) .Values.workerServiceAccount.name -}}
{{- end -}}

{{/*
The watched namespaces as a comma separated string: watchNamespaces (list or comma separated
string) without blanks and duplicates; empty = the release namespace; "*" alone = all.
*/}}
{{- define "sendgroup-operator.watchNamespaces" -}}
{{- $raw := .Values.watchNamespaces | default list -}}
{{- if kindIs "string" $raw -}}{{- $raw = splitList "," $raw -}}{{- end -}}
{{- $out := list -}}
{{- range $raw -}}
{{- $ns := trim (toString .) -}}
{{- if and $ns (not (has $ns $out)) -}}{{- $out = append $out $ns -}}{{- end -}}
{{- end -}}
{{- if and (has "*" $out) (gt (len $out) 1) -}}
{{- fail (printf "watchNamespaces: \"*\" (all namespaces) cannot be combined with names, got %s" (join "," $out)) -}}
{{- end -}}
{{- if not $out -}}{{- $out = list .Release.Namespace -}}{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* "true" when all namespaces are watched, else "". */}}
{{- define "sendgroup-operator.clusterwide" -}}
{{- if eq (include "sendgroup-operator.watchNamespaces" .) "*" -}}true{{- end -}}
{{- end -}}

{{/*
Namespaces that get per-namespace objects (Role, RoleBinding, worker ServiceAccount, dumps
claim, KopfPeering, worker NetworkPolicy), as a comma separated string: the watched ones, or
the release namespace when all are watched.
*/}}
{{- define "sendgroup-operator.objectNamespaces" -}}
{{- if include "sendgroup-operator.clusterwide" . -}}
{{- .Release.Namespace -}}
{{- else -}}
{{- include "sendgroup-operator.watchNamespaces" . -}}
{{- end -}}
{{- end -}}

{{/* The KopfPeering / ClusterKopfPeering name. */}}
{{- define "sendgroup-operator.peeringName" -}}
{{- default (include "sendgroup-operator.fullname" .) .Values.peering.name -}}
{{- end -}}

{{/* The operator image reference. */}}
{{- define "sendgroup-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The default worker image reference. */}}
{{- define "sendgroup-operator.defaultImage" -}}
{{- default (printf "sendgroup-worker:%s" .Chart.AppVersion) .Values.defaultImage -}}
{{- end -}}

{{/* The worker ServiceAccount the operator puts into worker pods, or "" (namespace default). */}}
{{- define "sendgroup-operator.workerServiceAccountSetting" -}}
{{- if .Values.workerServiceAccount.name -}}
{{- .Values.workerServiceAccount.name -}}
{{- else if and .Values.workerServiceAccount.create (not (include "sendgroup-operator.clusterwide" .)) -}}
{{- include "sendgroup-operator.workerServiceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/*
The operator's rules from files/rbac-rules.yaml (the single source, shared with the tests):
a dict with "namespaced" and "cluster" lists.
*/}}
{{- /* "true" when the groups are sharded over the instances (sharding.enabled, replicas >= 2),
else empty. */ -}}
{{- define "sendgroup-operator.sharded" -}}
{{- if and .Values.sharding.enabled (ge (int .Values.replicas) 2) -}}true{{- end -}}
{{- end -}}

{{- define "sendgroup-operator.rbacRules" -}}
{{- $rules := .Files.Get "files/rbac-rules.yaml" | fromYaml -}}
{{- if or (not $rules.namespaced) (not $rules.cluster) -}}
{{- fail "files/rbac-rules.yaml must define the lists \"namespaced\" and \"cluster\"" -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
