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
{{- $mem := include "envoy-rls.memory" . | fromJson -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--?(shutdown-delay|shutdown-timeout|memory-snapshot|memory-snapshot-interval)(=|$)" . -}}
{{- fail (printf "extraArgs %s: the chart sets this flag from shutdownDelay, drainSeconds and persistence (and the grace period with it): set those instead" .) -}}
{{- end -}}
{{- end -}}
- serve
- -config=/etc/envoy-rls
- -grpc-addr=:{{ .Values.service.grpcPort }}
- -http-addr=:{{ .Values.service.httpPort }}
- -shutdown-delay={{ .Values.shutdownDelay }}
- -shutdown-timeout={{ int .Values.drainSeconds }}s
- -grpc-max-connection-age={{ .Values.grpcMaxConnectionAge }}
- -failure-mode={{ .Values.store.failureMode }}
- -log-format=json
{{- if eq .Values.store.type "memory" }}
- -store=memory
{{- if .Values.persistence.enabled }}
- -memory-snapshot={{ include "envoy-rls.snapshotPath" . }}
- -memory-snapshot-interval={{ .Values.persistence.snapshotInterval }}
{{- end }}
{{- else if eq .Values.store.type "memcached" }}
{{- $m := .Values.store.memcached }}
- -store=memcached
{{- if $m.srv }}
- -memcached-srv={{ $m.srv }}
{{- if ne (toString $m.srvRefresh) "0s" }}
- -memcached-srv-refresh={{ $m.srvRefresh }}
{{- end }}
{{- else }}
- -memcached-addrs={{ join "," $m.addrs }}
{{- end }}
{{- if $m.keyPrefix }}
- {{ printf "-memcached-key-prefix=%s" $m.keyPrefix | quote }}
{{- end }}
{{- if $m.tls.enabled }}
- -memcached-tls
{{- if $m.tls.existingSecret }}
- -memcached-tls-ca=/etc/envoy-rls-memcached-tls/ca.crt
{{- end }}
{{- end }}
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
{{- with $r.perSecond }}
{{- if .url }}
- -redis-persecond-url={{ .url }}
{{- if .cluster }}
- -redis-persecond-cluster
{{- end }}
{{- if .sentinel.master }}
- -redis-persecond-sentinel-master={{ .sentinel.master }}
- -redis-persecond-sentinel-addrs={{ join "," .sentinel.addrs }}
{{- end }}
{{- if .existingSecret.name }}
- -redis-persecond-password-file=/etc/envoy-rls-redis-persecond/password
{{- end }}
{{- if .tls.existingSecret }}
- -redis-persecond-tls-ca=/etc/envoy-rls-redis-persecond-tls/ca.crt
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.regions }}
{{- if .name }}
- -region={{ .name }}
{{- with .peers }}
{{- $peers := list }}
{{- $files := list }}
{{- range . }}
{{- $peers = append $peers (printf "%s=%s" .name .url) }}
{{- if (.existingSecret | default dict).name }}
{{- $files = append $files (printf "%s=/etc/envoy-rls-regions/%s" .name .name) }}
{{- end }}
{{- end }}
- {{ printf "-region-peers=%s" (join "," $peers) | quote }}
{{- with $files }}
- -region-peer-password-files={{ join "," . }}
{{- end }}
{{- end }}
- -region-interval={{ .interval }}
- -region-silence={{ .silence }}
{{- end }}
{{- end }}
{{- with $mem.maxBytes }}
- -memory-max-bytes={{ . }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}

{{/*
Checks the regions' values (nothing rendered): what envoy-rls would
refuse at start, refused at install, naming the value. Peer names and
URLs, and the durations' forms, are the schema's.
*/}}
{{- define "envoy-rls.checkRegions" -}}
{{- $r := .Values.regions | default dict -}}
{{- $peers := $r.peers | default list -}}
{{- if and (not $r.name) $peers -}}
{{- fail "regions.peers needs regions.name: this region's own name (-region)" -}}
{{- end -}}
{{- if $r.name -}}
{{- if .Values.dropIn.enabled -}}
{{- fail "regions.name: regions take envoy-rls's own start (-region), not the drop-in start: set dropIn.enabled false" -}}
{{- end -}}
{{- if ne .Values.store.type "redis" -}}
{{- fail (printf "regions.name: regions need store.type redis, not %s: each region decides on its own Redis, and the regions exchange through them" .Values.store.type) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $peers -}}
{{- if eq .name $r.name -}}
{{- fail (printf "regions.peers: %q is this region (regions.name): list the other regions only" .name) -}}
{{- end -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "regions.peers: region %q twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- if lt (include "envoy-rls.millis" $r.silence | int64) (include "envoy-rls.millis" $r.interval | int64) -}}
{{- fail (printf "regions.silence (%s) must be at least regions.interval (%s)" $r.silence $r.interval) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Milliseconds of a duration given as N and ms, s, m or h. */}}
{{- define "envoy-rls.millis" -}}
{{- $d := toString . -}}
{{- $n := regexFind "^[0-9]+" $d -}}
{{- mul ($n | int64) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) (trimPrefix $n $d)) -}}
{{- end -}}

{{/* The memory store's snapshot file, on the persistent volume. */}}
{{- define "envoy-rls.snapshotPath" -}}
{{- printf "%s/buckets.snapshot" (trimSuffix "/" .Values.persistence.mountPath) -}}
{{- end -}}

{{/* The persistent volume's claim: the chart's, or an existing one. */}}
{{- define "envoy-rls.claim" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" (include "envoy-rls.fullname" .)) -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: past the shutdown delay (NOT_SERVING while
endpoints drain), the shutdown timeout (drainSeconds, for the calls in
flight) and 5s to exit; with persistence, 10s more for the memory store's
final snapshot, written after the drain.
*/}}
{{- define "envoy-rls.gracePeriod" -}}
{{- $s := add (include "envoy-rls.seconds" .Values.shutdownDelay) .Values.drainSeconds 5 -}}
{{- if .Values.persistence.enabled -}}{{- $s = add $s 10 -}}{{- end -}}
{{- $s -}}
{{- end -}}

{{/* Whole seconds of a duration given as Ns or Nm (shutdownDelay). */}}
{{- define "envoy-rls.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | atoi) 60 }}{{- else -}}{{ trimSuffix "s" $d | atoi }}{{- end -}}
{{- end -}}

{{/*
The bytes of a Kubernetes quantity (resources.limits.memory), as Kubernetes
reads it: a whole or decimal number with an optional suffix, binary (Ki, Mi,
Gi, Ti, Pi) or decimal (k or K, M, G, T, P), rounded up to a whole byte; a
number given as a YAML number is bytes. Called with a dict: value, and what
(the value's name, for the error).
*/}}
{{- define "envoy-rls.quantityBytes" -}}
{{- $v := .value -}}
{{- if not (kindIs "string" $v) -}}{{- $v = int64 $v | toString -}}{{- end -}}
{{- $v = trim $v -}}
{{- $units := dict "" 1 "k" 1000 "K" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $v -}}
{{- $unit := trimPrefix $num $v -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "%s: %q is not a quantity the chart can read: a number with an optional suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T or P, as 256Mi, 1.5Gi or 1000000000" .what $v) -}}
{{- end -}}
{{- $frac := regexReplaceAll "^[0-9]*\\.?" $num "" -}}
{{- $scale := 1 -}}
{{- range until (len $frac) -}}{{- $scale = mul $scale 10 -}}{{- end -}}
{{- div (add (mul (replace "." "" $num | atoi) (get $units $unit)) (sub $scale 1)) $scale -}}
{{- end -}}

{{/*
The bytes of a size as envoy-rls's -memory-max-bytes reads it (decimal:
true; B, KiB, MiB, GiB, TiB, KB, MB, GB, TB) or as Go's runtime reads
GOMEMLIMIT (B, KiB, MiB, GiB, TiB only): a whole number with an optional
unit. Called with a dict: value, what (for the error), decimal.
*/}}
{{- define "envoy-rls.sizeBytes" -}}
{{- $v := toString .value -}}
{{- $units := dict "" 1 "B" 1 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776 -}}
{{- if .decimal -}}
{{- $v = trim $v -}}
{{- $units = merge (dict "KB" 1000 "MB" 1000000 "GB" 1000000000 "TB" 1000000000000) $units -}}
{{- end -}}
{{- $num := regexFind "^[0-9]+" $v -}}
{{- $unit := trimPrefix $num $v -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "%s: %q is not a size %s reads: a whole number of bytes with an optional unit %s, as 128MiB" .what $v (ternary "envoy-rls" "Go" .decimal) (ternary "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB" "B, KiB, MiB, GiB or TiB" .decimal)) -}}
{{- end -}}
{{- mul (atoi $num) (get $units $unit) -}}
{{- end -}}

{{/* Bytes as a whole number of MiB, rounded down, in a form both Go's
GOMEMLIMIT and -memory-max-bytes read. */}}
{{- define "envoy-rls.mib" -}}
{{- div . 1048576 }}MiB
{{- end -}}

{{/*
The container's memory settings, as JSON: goMemLimit, the GOMEMLIMIT the
chart sets ("" when env sets its own), and maxBytes, the -memory-max-bytes
the chart passes ("" when extraArgs or env sets it). From the container's
memory limit L (resources.limits.memory):
  GOMEMLIMIT         80% of L, rounded down to a MiB (256Mi: 204MiB)
  -memory-max-bytes  half of L, rounded down to a MiB (256Mi: 128MiB)
The store's bound is half, as the rest of the heap (its overhead at GOGC,
the over-limit cache, gRPC buffers) needs the other half. Values given
instead are checked: -memory-max-bytes (store.memoryMaxBytes, extraArgs or
RLS_MEMORY_MAX_BYTES) at most half of L, GOMEMLIMIT at most 90% of L. L is
at least 64Mi. Without L, both must be given.
*/}}
{{- define "envoy-rls.memory" -}}
{{- $env := dict -}}
{{- range .Values.env -}}
{{- if and (kindIs "map" .) .name -}}{{- $_ := set $env (toString .name) (hasKey . "value" | ternary (toString .value) "") -}}{{- end -}}
{{- end -}}
{{- if .Values.dropIn.enabled -}}
{{- range $k, $v := .Values.dropIn.env -}}{{- $_ := set $env $k (toString $v) -}}{{- end -}}
{{- end -}}
{{- $given := list -}}
{{- $maxBytes := "" -}}
{{- if .Values.store.memoryMaxBytes -}}
{{- $given = append $given (printf "store.memoryMaxBytes=%s" .Values.store.memoryMaxBytes) -}}
{{- $maxBytes = toString .Values.store.memoryMaxBytes -}}
{{- end -}}
{{- if not .Values.dropIn.enabled -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--?memory-max-bytes(=|$)" . -}}
{{- $given = append $given (printf "extraArgs %s" .) -}}
{{- $maxBytes = regexReplaceAll "^--?memory-max-bytes=?" . "" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if hasKey $env "RLS_MEMORY_MAX_BYTES" -}}
{{- $given = append $given (printf "env RLS_MEMORY_MAX_BYTES=%s" (get $env "RLS_MEMORY_MAX_BYTES")) -}}
{{- $maxBytes = get $env "RLS_MEMORY_MAX_BYTES" -}}
{{- end -}}
{{- if gt (len $given) 1 -}}
{{- fail (printf "-memory-max-bytes is set %d times (%s): set it once" (len $given) (join ", " $given)) -}}
{{- end -}}
{{- $goMemLimit := "" -}}
{{- if hasKey $env "GOMEMLIMIT" -}}{{- $goMemLimit = get $env "GOMEMLIMIT" -}}{{- end -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- if not (kindIs "string" $limit) -}}{{- $limit = int64 $limit | toString -}}{{- end -}}
{{- $out := dict "goMemLimit" "" "maxBytes" "" -}}
{{- if eq $limit "" -}}
{{- if not (and $given (hasKey $env "GOMEMLIMIT")) -}}
{{- fail "resources.limits.memory is not set: the chart sets GOMEMLIMIT (80% of it) and -memory-max-bytes (half of it) from the container's memory limit; set a limit (the default is 256Mi), or set both GOMEMLIMIT in env and store.memoryMaxBytes" -}}
{{- end -}}
{{- else -}}
{{- $l := include "envoy-rls.quantityBytes" (dict "value" $limit "what" "resources.limits.memory") | int64 -}}
{{- if lt $l 67108864 -}}
{{- fail (printf "resources.limits.memory: %s is less than 64Mi, too little to run envoy-rls" $limit) -}}
{{- end -}}
{{- if $given -}}
{{- $b := include "envoy-rls.sizeBytes" (dict "value" $maxBytes "what" (first $given) "decimal" true) | int64 -}}
{{- if gt (mul $b 2) $l -}}
{{- fail (printf "%s is more than half of resources.limits.memory %s (%s): the rest of the container's memory is the Go heap's overhead, the over-limit cache and gRPC buffers; lower it, or raise the limit" (first $given) $limit (include "envoy-rls.mib" (div $l 2))) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $out "maxBytes" (include "envoy-rls.mib" (div $l 2)) -}}
{{- end -}}
{{- if hasKey $env "GOMEMLIMIT" -}}
{{- if $goMemLimit -}}{{/* "": from valueFrom, the chart cannot see it */}}
{{- $g := include "envoy-rls.sizeBytes" (dict "value" $goMemLimit "what" (printf "env GOMEMLIMIT=%s" $goMemLimit) "decimal" false) | int64 -}}
{{- if gt (mul $g 10) (mul $l 9) -}}
{{- fail (printf "env GOMEMLIMIT=%s is more than 90%% of resources.limits.memory %s (%s): the garbage collector would not hold the heap under the limit before the kernel kills the container; lower it (the chart sets 80%% without it)" $goMemLimit $limit (include "envoy-rls.mib" (div (mul $l 9) 10))) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $_ := set $out "goMemLimit" (include "envoy-rls.mib" (div (mul $l 8) 10)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.store.memoryMaxBytes -}}
{{- $_ := set $out "maxBytes" $maxBytes -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
