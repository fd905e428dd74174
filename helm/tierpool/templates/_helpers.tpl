{{- define "tierpool.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end }}

{{- define "tierpool.labels" -}}
app.kubernetes.io/name: tierpool-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tierpool
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "tierpool.selectorLabels" -}}
app.kubernetes.io/name: tierpool-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tierpool.serviceAccountName" -}}
{{- default (include "tierpool.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Namespaces where the operator may read Secrets: never cluster-wide. */}}
{{- define "tierpool.secretNamespaces" -}}
{{- if .Values.secretNamespaces }}{{ join "," .Values.secretNamespaces }}
{{- else if .Values.watchNamespaces }}{{ join "," .Values.watchNamespaces }}
{{- else }}{{ .Release.Namespace }}{{ end }}
{{- end }}

{{/* Namespaces whose worker pods get a NetworkPolicy (comma-separated). */}}
{{- define "tierpool.workerPolicyNamespaces" -}}
{{- if .Values.networkPolicy.workerNamespaces }}{{ join "," .Values.networkPolicy.workerNamespaces }}
{{- else if .Values.watchNamespaces }}{{ join "," .Values.watchNamespaces }}
{{- else }}{{ .Release.Namespace }}{{ end }}
{{- end }}

{{/* A NetworkPolicy spec's ingress: the `metrics` port from `networkPolicy.metricsFrom`; none when it is empty. */}}
{{- define "tierpool.metricsIngress" -}}
policyTypes: [Ingress]
{{- if .Values.networkPolicy.metricsFrom }}
ingress:
  - ports: [{port: metrics, protocol: TCP}]
    from: {{- toYaml .Values.networkPolicy.metricsFrom | nindent 6 }}
{{- else }}
ingress: []
{{- end }}
{{- end }}

{{/* The Secret (key `url`) the NOTES' example pool and the helm test read the Redis URL from. */}}
{{- define "tierpool.testRedisSecret" -}}
{{- .Values.tests.redisUrlSecret | default (ternary (printf "%s-redis" (include "tierpool.fullname" .)) "my-redis" .Values.redis.enabled) }}
{{- end }}

{{/* NAMESPACE/NAME of the pool `helm test` submits to: the NOTES' example pool unless tests.pool names another. */}}
{{- define "tierpool.testPool" -}}
{{- .Values.tests.pool | default (printf "%s/minimal" (include "tierpool.examplePoolNamespace" .)) }}
{{- end }}

{{/* Where the NOTES' example pool lives: next to the dev Redis' Secret, else where the operator may read Secrets. */}}
{{- define "tierpool.examplePoolNamespace" -}}
{{- if .Values.redis.enabled }}{{ .Release.Namespace }}
{{- else }}{{ first (splitList "," (include "tierpool.secretNamespaces" .)) }}{{ end }}
{{- end }}
