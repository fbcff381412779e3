#!/usr/bin/env bash
# soak.sh runs envoy-rls for a few minutes under load with key churn (2
# million keys in turn, two buckets each, every one drained and dropped
# before its key comes back) and a config reload every SOAK_RELOAD_EVERY,
# on each store of SOAK_STORES, and reports its resident memory (RSS),
# goroutines and open file descriptors after the warmup and at the end. It
# fails if they grew: RSS past three times -memory-max-bytes (the soft
# memory limit the service sets for its garbage collector: a full store
# may take that much heap) plus SOAK_RSS_OVERHEAD_MIB, goroutines by more
# than 50, descriptors by more than 20, or if a reload was not applied.
#
#   SOAK_DURATION (3m)  SOAK_WARMUP (20s)  SOAK_RELOAD_EVERY (15s)
#   SOAK_STORES ('memory redis': redis is exact mode on a redis-server this
#     script starts; local-first is redis-local)
#   SOAK_MAX_BYTES (64MiB: -memory-max-bytes)  SOAK_RSS_OVERHEAD_MIB (48)
#   SOAK_KEYS (2000000: distinct keys in turn; the load tool builds a
#     request for each, about 450 bytes apiece)  SOAK_CONCURRENCY (16)
#
# See docs/reliability.md for the figures of a run.
set -euo pipefail

duration=${SOAK_DURATION:-3m}
warmup=${SOAK_WARMUP:-20s}
reload_every=${SOAK_RELOAD_EVERY:-15s}
stores=${SOAK_STORES:-memory redis}
max_bytes=${SOAK_MAX_BYTES:-64MiB}
overhead_mib=${SOAK_RSS_OVERHEAD_MIB:-48}
keys=${SOAK_KEYS:-2000000}
concurrency=${SOAK_CONCURRENCY:-16}

cd "$(dirname "$0")/.."
log() { echo "soak: $*" >&2; }
for tool in go redis-server redis-cli curl; do
	command -v "$tool" >/dev/null || { log "$tool is not on PATH"; exit 1; }
done
for s in $stores; do
	case $s in memory | redis | redis-local) ;; *) log "unknown store $s (memory, redis, redis-local)"; exit 1 ;; esac
done

# seconds DURATION prints a Go duration of s or m in whole seconds.
seconds() {
	awk -v d="$1" 'BEGIN { u = d; sub(/^[0-9.]+/, "", u); n = substr(d, 1, length(d) - length(u)) + 0
		if (u == "s") print int(n); else if (u == "m") print int(n * 60); else exit 1 }' || { log "$1: want a duration in s or m"; exit 1; }
}
# bytes SIZE prints -memory-max-bytes's SIZE (as 64MiB) in bytes.
bytes() {
	awk -v s="$1" 'BEGIN { u = s; sub(/^[0-9]+/, "", u); n = substr(s, 1, length(s) - length(u)) + 0
		m = u == "" ? 1 : u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 0
		if (m == 0) exit 1; printf "%d", n * m }' || { log "SOAK_MAX_BYTES=$1: want bytes, KiB, MiB or GiB"; exit 1; }
}
total_s=$(seconds "$duration")
warmup_s=$(seconds "$warmup")
reload_s=$(seconds "$reload_every")
max=$(bytes "$max_bytes")
((total_s > warmup_s)) || { log "SOAK_DURATION must be longer than SOAK_WARMUP"; exit 1; }

# shellcheck source=workdir.sh
source scripts/workdir.sh

log "building"
go build -o "$work/envoy-rls" ./cmd/envoy-rls
go build -o "$work/rls-bench" ./cmd/rls-bench

# shellcheck source=ports.sh
source scripts/ports.sh

# The limits: two levels, buckets that drain within seconds, so that
# Redis holds only the last seconds' keys while the memory store's bound
# is what keeps it in check.
write_config() {
	mkdir -p "$work/config"
	cat >"$work/config/soak.yaml.new" <<EOF
# reload $1
domain: api
descriptors:
  - key: user
    leaky_bucket: {size: 100, drip_rate: 100ms}
    descriptors:
      - key: action
        leaky_bucket: {size: 10, drip_rate: 1s}
EOF
	mv "$work/config/soak.yaml.new" "$work/config/soak.yaml"
}

# sample PID HTTP prints RSS (KiB), goroutines and open descriptors.
sample() {
	local rss goroutines fds
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$1/status")
	goroutines=$(curl -sf "http://$2/metrics" | awk '$1 == "go_goroutines" { print $2 }')
	fds=$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l)
	echo "$rss ${goroutines:-0} $fds"
}

failed=0
printf '%-12s %8s %10s %10s %12s %12s %8s %8s\n' store reloads "RSS start" "RSS end" goroutines "" fds "" >"$work/report"
for store in $stores; do
	write_config 0
	free_port grpc
	free_port http
	flags=(-store memory)
	if [[ $store != memory ]]; then
		free_port rport
		redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
		pids+=($!)
		redis_pid=$!
		until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done
		flags=(-store redis -redis-url "redis://127.0.0.1:$rport/0")
		if [[ $store == redis-local ]]; then flags+=(-sync-interval 1s); fi
	fi
	"$work/envoy-rls" -config "$work/config" -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" -admin-addr "" \
		-memory-max-bytes "$max_bytes" "${flags[@]}" >"$work/rls.log" 2>&1 &
	server=$!
	pids+=($server)
	until curl -sf "http://127.0.0.1:$http/readyz" >/dev/null; do
		kill -0 "$server" 2>/dev/null || { cat "$work/rls.log" >&2; exit 1; }
		sleep 0.1
	done
	log "$store: ${duration} of load over $keys keys, a reload every ${reload_every}"
	"$work/rls-bench" load -addr "127.0.0.1:$grpc" -duration "${total_s}s" -warmup 0 -c "$concurrency" -conns 4 \
		-keys "$keys" -pick turn -format tsv >"$work/load.tsv" 2>"$work/load.err" &
	load=$!
	pids+=($load)
	start=""
	reloads=0
	for ((t = 0; t < total_s; t++)); do
		sleep 1
		if ((t + 1 == warmup_s)); then start=$(sample "$server" "127.0.0.1:$http"); fi
		if (((t + 1) % reload_s == 0)); then
			reloads=$((reloads + 1))
			write_config "$reloads"
		fi
	done
	end=$(sample "$server" "127.0.0.1:$http")
	wait "$load" || { cat "$work/load.err" >&2; exit 1; }
	read -r rss0 g0 f0 <<<"$start"
	read -r rss1 g1 f1 <<<"$end"
	applied=$(curl -sf "http://127.0.0.1:$http/metrics" | awk '$1 == "envoy_rls_config_reloads_total{result=\"success\"}" { print $2 }')
	printf '%-12s %8s %8d MiB %6d MiB %6d -> %-6d %4d -> %-4d\n' "$store" "${applied:-0}/$reloads" $((rss0 / 1024)) $((rss1 / 1024)) "$g0" "$g1" "$f0" "$f1" >>"$work/report"
	rps=$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i } NR == 2 { print $c["rps"] }' "$work/load.tsv")
	log "$store: $rps req/s; RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MiB, goroutines $g0 -> $g1, descriptors $f0 -> $f1"
	if ((rss1 * 1024 > 3 * max + overhead_mib * 1048576)); then
		log "$store: RSS $((rss1 / 1024)) MiB is past three times -memory-max-bytes plus ${overhead_mib} MiB"
		failed=1
	fi
	if ((g1 > g0 + 50)); then log "$store: goroutines grew from $g0 to $g1"; failed=1; fi
	if ((f1 > f0 + 20)); then log "$store: open descriptors grew from $f0 to $f1"; failed=1; fi
	if [[ ${applied%.*} != "$reloads" ]]; then log "$store: $reloads reloads written, ${applied:-0} applied"; failed=1; fi
	kill "$server"
	wait "$server" 2>/dev/null || true
	if [[ $store != memory ]]; then kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; fi
done
echo "envoy-rls soak: $(nproc) CPUs, $duration per store (start: after $warmup), -memory-max-bytes $max_bytes, $concurrency callers, keys in turn of $keys"
cat "$work/report"
exit $failed
