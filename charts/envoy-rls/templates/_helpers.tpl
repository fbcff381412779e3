{{/* The release's name for objects, at most 63 characters. */}}
{{- define "envoy-rls.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "envoy-rls.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "envoy-rls.labels" -}}
{{ include "envoy-rls.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "envoy-rls.configMap" -}}
{{- .Values.config.existingConfigMap | default (printf "%s-config" (include "envoy-rls.fullname" .)) -}}
{{- end -}}

{{/* The serve command's flags (envoy-rls's own start). */}}
{{- define "envoy-rls.args" -}}
- serve
- -config=/etc/envoy-rls
- -grpc-addr=:{{ .Values.service.grpcPort }}
- -http-addr=:{{ .Values.service.httpPort }}
- -shutdown-delay={{ .Values.shutdownDelay }}
- -grpc-max-connection-age={{ .Values.grpcMaxConnectionAge }}
- -failure-mode={{ .Values.store.failureMode }}
- -log-format=json
{{- if eq .Values.store.type "memory" }}
- -store=memory
- -memory-max-bytes={{ .Values.store.memoryMaxBytes }}
{{- else }}
{{- $r := .Values.store.redis }}
- -store=redis
- -redis-url={{ $r.url }}
{{- if $r.cluster }}
- -redis-cluster
{{- end }}
{{- if $r.sentinel.master }}
- -redis-sentinel-master={{ $r.sentinel.master }}
- -redis-sentinel-addrs={{ join "," $r.sentinel.addrs }}
{{- end }}
{{- if $r.existingSecret.name }}
- -redis-password-file=/etc/envoy-rls-redis/password
{{- end }}
{{- if $r.tls.existingSecret }}
- -redis-tls-ca=/etc/envoy-rls-redis-tls/ca.crt
{{- end }}
{{- if ne (toString $r.syncInterval) "0s" }}
- -sync-interval={{ $r.syncInterval }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}

{{/* Whole seconds of a duration given as Ns or Nm (shutdownDelay). */}}
{{- define "envoy-rls.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | atoi) 60 }}{{- else -}}{{ trimSuffix "s" $d | atoi }}{{- end -}}
{{- end -}}
