#!/usr/bin/env bash
# Plots throughput and p99 latency against concurrency: drives rls-bench's
# null server (what gRPC alone allows, the ceiling) and envoy-rls on its
# memory store with "rls-bench load" at each concurrency, writes the runs
# as TSV, and draws them as SVG with "rls-bench plot". See
# docs/performance.md.
#
# Needs go. Settings (environment):
#   PLOT_CONCURRENCY ('1 2 4 8 16 32 64 128 256')
#   PLOT_DURATION (5s)  PLOT_WARMUP (1s)  PLOT_CONNS (4)  PLOT_KEYS (10000)
#   PLOT_DESCRIPTOR ('user=u%d,action=a%d')
#   PLOT_OUT (docs/concurrency.svg; the runs go beside it, in .tsv)
# The targets take turns at each concurrency, so that a slow spell of a
# shared machine touches both.
set -euo pipefail

concurrency=${PLOT_CONCURRENCY:-1 2 4 8 16 32 64 128 256}
duration=${PLOT_DURATION:-5s}
warmup=${PLOT_WARMUP:-1s}
conns=${PLOT_CONNS:-4}
keys=${PLOT_KEYS:-10000}
descriptor=${PLOT_DESCRIPTOR:-'user=u%d,action=a%d'}
out=${PLOT_OUT:-docs/concurrency.svg}
runs=${out%.svg}.tsv

cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "plot: go is not on PATH" >&2; exit 1; }

# shellcheck source=workdir.sh
source scripts/workdir.sh

log() { echo "plot: $*" >&2; }

# wait_for runs its arguments until they succeed, for up to 10 s.
wait_for() {
	for _ in $(seq 100); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "gave up waiting for: $*"
	exit 1
}

# listening NAME prints the address the server NAME logged it listens on.
listening() { awk '/listening on/ {print $3; exit}' "$work/$1.out"; }

log "building"
go build -o "$work/envoy-rls" ./cmd/envoy-rls
go build -o "$work/rls-bench" ./cmd/rls-bench

declare -A addr
"$work/rls-bench" null -listen 127.0.0.1:0 >"$work/null.out" 2>&1 &
pids+=($!)
wait_for grep -q "listening on" "$work/null.out"
addr[null]=$(listening null)

# envoy-rls on a free port: it logs the address it took.
"$work/envoy-rls" -config scripts/bench.yaml -grpc-addr 127.0.0.1:0 -http-addr 127.0.0.1:0 -admin-addr "" \
	-watch-config=false >"$work/memory.out" 2>&1 &
pids+=($!)
wait_for grep -q "envoy-rls serving" "$work/memory.out"
addr[memory]=$(sed -n 's/.*envoy-rls serving.* grpc=\([^ ]*\) .*/\1/p' "$work/memory.out")
wait_for "$work/envoy-rls" healthcheck -grpc-addr "${addr[memory]}"

header=
: >"$work/runs.tsv"
for c in $concurrency; do
	for target in null memory; do
		log "$target, c=$c"
		report=$("$work/rls-bench" load -addr "${addr[$target]}" -c "$c" -conns "$conns" -keys "$keys" \
			-descriptor "$descriptor" -duration "$duration" -warmup "$warmup" -format tsv)
		if [[ -z $header ]]; then
			header=$(printf 'target\tc\t%s' "$(head -1 <<<"$report")")
			echo "$header" >>"$work/runs.tsv"
		fi
		printf '%s\t%s\t%s\n' "$target" "$c" "$(tail -1 <<<"$report")" >>"$work/runs.tsv"
	done
done

cp "$work/runs.tsv" "$runs"
"$work/rls-bench" plot -in "$runs" -o "$out" \
	-title "Throughput and p99 against concurrency: null server and envoy-rls (memory store), $duration per point"
log "wrote $out and $runs"
cut -f1,2,5,8 "$runs" >&2
