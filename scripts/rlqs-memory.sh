#!/usr/bin/env bash
# Measures the memory an RLQS stream holds: N Envoys (rls-bench rlqs, each
# on its own connection, reporting M buckets every interval, the same M
# for all, as a fleet behind one balancer) against
# rls-bench's null server (a bare gRPC RLQS server: what gRPC itself holds
# per connection) and against envoy-rls, on the memory store and on Redis.
# For each target it reads, once it serves and no Envoy is connected and
# again once every Envoy has reported a few times, what the server holds
# live (its heap after a collection and its goroutines' stacks, both Go
# servers' /metrics) and its resident memory (VmRSS, which adds the
# garbage a collection has not taken yet: GOGC is 400 in both); each
# difference over N is what an Envoy costs. Targets take turns within
# each round. See docs/performance.md.
#
# Needs Linux (/proc), go, redis-server and redis-cli. Settings:
#   MEM_ENVOYS (2000)  MEM_BUCKETS (1)  MEM_INTERVAL (5s)  MEM_ROUNDS (2)
#   MEM_TARGETS ('null memory redis')
set -euo pipefail

envoys=${MEM_ENVOYS:-2000}
buckets=${MEM_BUCKETS:-1}
interval=${MEM_INTERVAL:-5s}
rounds=${MEM_ROUNDS:-2}
targets=${MEM_TARGETS:-null memory redis}

cd "$(dirname "$0")/.."
# shellcheck source=ports.sh
source scripts/ports.sh
# shellcheck source=workdir.sh
source scripts/workdir.sh
# shellcheck source=wait.sh
source scripts/wait.sh

log() { echo "rlqs-memory: $*" >&2; }
for tool in go redis-server redis-cli curl; do
	command -v "$tool" >/dev/null || { log "$tool is not on PATH"; exit 1; }
done

rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
# live_kib reads the target's heap after a collection and its stacks, KiB.
live_kib() {
	curl -fsS "http://$debug/debug/pprof/heap?gc=1" >/dev/null
	curl -fsS "http://$metrics/metrics" | awk '$1 == "go_memstats_heap_alloc_bytes" || $1 == "go_memstats_stack_inuse_bytes" {s += $2} END {printf "%d", s / 1024}'
}

log "building"
go build -o "$work/envoy-rls" ./cmd/envoy-rls
go build -o "$work/rls-bench" ./cmd/rls-bench

free_port redis_port
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for "${pids[-1]}" redis-cli -p "$redis_port" ping || exit 1

# start TARGET sets server (its pid), addr, metrics and debug (where its
# /metrics and /debug/pprof/ are) once it serves.
start() {
	local grpc http admin
	free_port grpc
	free_port http
	free_port admin
	case $1 in
	null)
		"$work/rls-bench" null -listen "127.0.0.1:$grpc" -debug-listen "127.0.0.1:$http" >"$work/null.log" 2>&1 &
		server=$!
		wait_for "$server" grep -q "listening on" "$work/null.log" || exit 1
		metrics=127.0.0.1:$http debug=127.0.0.1:$http
		;;
	memory | redis)
		local store=()
		if [[ $1 == redis ]]; then store=(-store redis -redis-url "redis://127.0.0.1:$redis_port/0"); fi
		"$work/envoy-rls" -config scripts/bench.yaml -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" \
			-admin-addr "127.0.0.1:$admin" -pprof -watch-config=false "${store[@]}" >"$work/$1.log" 2>&1 &
		server=$!
		wait_for "$server" "$work/envoy-rls" healthcheck -grpc-addr "127.0.0.1:$grpc" || exit 1
		metrics=127.0.0.1:$http debug=127.0.0.1:$admin
		;;
	*) log "unknown target $1"; exit 1 ;;
	esac
	addr=127.0.0.1:$grpc
}

declare -A live_per rss_per
printf "%-8s %5s %15s %17s %17s %16s\n" target round "live idle MiB" "live loaded MiB" "live KiB/Envoy" "RSS KiB/Envoy"
for round in $(seq "$rounds"); do
	for t in $targets; do
		start "$t"
		sleep 1
		idle=$(rss_kib "$server")
		live_idle=$(live_kib)
		# Every Envoy reports within the first interval; the reading comes
		# after three, the run goes on a little beyond it.
		"$work/rls-bench" rlqs -target "$addr" -instances "$envoys" -buckets "$buckets" -interval "$interval" -requests 10 \
			-warmup 0s -duration "$(awk -v i="${interval%s}" 'BEGIN {print 4 * i}')s" -grace 1s >"$work/bench-$t.out" 2>&1 &
		bench=$!
		sleep "$(awk -v i="${interval%s}" 'BEGIN {print 3 * i + 1}')"
		loaded=$(rss_kib "$server")
		live_loaded=$(live_kib)
		wait "$bench" || { log "rls-bench failed against $t:"; cat "$work/bench-$t.out" >&2; exit 1; }
		kill "$server"
		wait "$server" 2>/dev/null || true
		redis-cli -p "$redis_port" flushall >/dev/null
		live=$(awk -v a="$live_idle" -v b="$live_loaded" -v n="$envoys" 'BEGIN {printf "%.1f", (b - a) / n}')
		rss=$(awk -v a="$idle" -v b="$loaded" -v n="$envoys" 'BEGIN {printf "%.1f", (b - a) / n}')
		live_per[$t]+=" $live" rss_per[$t]+=" $rss"
		printf "%-8s %5d %15.1f %17.1f %17s %16s\n" "$t" "$round" "$(awk -v k="$live_idle" 'BEGIN {print k / 1024}')" \
			"$(awk -v k="$live_loaded" 'BEGIN {print k / 1024}')" "$live" "$rss"
	done
done
echo
for t in $targets; do
	echo "$t: KiB per Envoy, live:${live_per[$t]}; resident:${rss_per[$t]}"
done
