{{/* The chart name, or nameOverride: the app.kubernetes.io/name label. */}}
{{- define "queuescale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every name: the release name, plus the chart name unless the release name contains it.
Truncated to 54 so that "<fullname>-operator" fits in 63 characters. */}}
{{- define "queuescale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "queuescale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. manifests/ carries only app.kubernetes.io/name (and component); the others are
Helm's and tests/test_chart.py drops them before comparing. */}}
{{- define "queuescale.labels" -}}
app.kubernetes.io/name: {{ include "queuescale.name" . }}
helm.sh/chart: {{ include "queuescale.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator pods: name, component and instance, so that two releases (shards) never select each other. */}}
{{- define "queuescale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queuescale.name" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "queuescale.operatorLabels" -}}
{{ include "queuescale.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "queuescale.operatorName" -}}
{{- printf "%s-operator" (include "queuescale.fullname" .) }}
{{- end }}

{{- define "queuescale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "queuescale.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "queuescale.leaseName" -}}
{{- default (include "queuescale.operatorName" .) .Values.leaderElection.leaseName }}
{{- end }}
