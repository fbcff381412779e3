#!/usr/bin/env bash
# Measures envoy-rls against the ceiling gRPC alone allows on this machine,
# in one run: it starts Redis, rls-bench's null server and envoy-rls (memory
# store; Redis store batched, local-first and unbatched), drives each with the same load,
# counts Redis commands per request and Redis memory per bucket, and prints
# a table with ratios to the null ceiling. See docs/performance.md.
#
# Needs Linux (/proc, for the CPU each process spends), go, redis-server and
# redis-cli. Settings (environment):
#   BENCH_DURATION (10s)  BENCH_WARMUP (2s)  BENCH_ROUNDS (3)
#   BENCH_CONCURRENCY (64)  BENCH_CONNS (4)  BENCH_KEYS (10000)
#   BENCH_DESCRIPTOR ('user=u%d,action=a%d')
#   BENCH_SYNC_INTERVAL (1s: the redis-local target's -sync-interval)
#   BENCH_TARGETS ('null memory redis redis-local redis-unbatched', and reference when
#   BENCH_PEER names an envoyproxy/ratelimit binary: docs/performance.md says
#   how to build one; redis-pipelined, a script call per request in
#   pipelines, on request)
# Targets run in turn within each round, so that a slower spell of a shared
# machine touches them all; the table shows each figure's median over rounds,
# and each ratio to the null ceiling is the median of the ratios of a round.
set -euo pipefail

duration=${BENCH_DURATION:-10s}
warmup=${BENCH_WARMUP:-2s}
rounds=${BENCH_ROUNDS:-3}
concurrency=${BENCH_CONCURRENCY:-64}
conns=${BENCH_CONNS:-4}
keys=${BENCH_KEYS:-10000}
descriptor=${BENCH_DESCRIPTOR:-'user=u%d,action=a%d'}
peer=${BENCH_PEER:-}
sync_interval=${BENCH_SYNC_INTERVAL:-1s}
default_targets="null memory redis redis-local redis-unbatched"
if [[ -n $peer ]]; then default_targets+=" reference"; fi
targets=${BENCH_TARGETS:-$default_targets}

cd "$(dirname "$0")/.."
for tool in go redis-server redis-cli; do
	command -v "$tool" >/dev/null || { echo "bench: $tool is not on PATH" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n ${BENCH_KEEP:-} ]]; then echo "bench: logs in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

log() { echo "bench: $*" >&2; }

# free_port prints a loopback port nothing listens on.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# wait_for runs its arguments until they succeed, for up to 10 s.
wait_for() {
	for _ in $(seq 100); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "gave up waiting for: $*"
	exit 1
}

log "building"
go build -o "$work/envoy-rls" ./cmd/envoy-rls
go build -o "$work/rls-bench" ./cmd/rls-bench

redis_port=$(free_port)
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
redis_pid=$!
rcli() { redis-cli -p "$redis_port" "$@"; }
wait_for rcli ping
redis_version=$(rcli info server | tr -d '\r' | awk -F: '$1 == "redis_version" {print $2}')

declare -A addr pid
"$work/rls-bench" null -listen 127.0.0.1:0 >"$work/null.out" 2>&1 &
pids+=($!)
pid[null]=$!
wait_for grep -q "listening on" "$work/null.out"
addr[null]=$(awk '/listening on/ {print $3}' "$work/null.out")

# start_rls NAME FLAGS... starts envoy-rls and waits until it serves.
start_rls() {
	local name=$1 grpc http
	shift
	grpc=$(free_port)
	http=$(free_port)
	"$work/envoy-rls" -config scripts/bench.yaml -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" -admin-addr "" \
		-watch-config=false "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	pid[$name]=$!
	wait_for "$work/envoy-rls" healthcheck -grpc-addr "127.0.0.1:$grpc"
	addr[$name]=127.0.0.1:$grpc
}
# start_reference starts envoyproxy/ratelimit ($peer), set by its
# environment variables as it is deployed, on the same Redis under keys of
# its own, and waits until it serves.
start_reference() {
	local grpc http debug
	[[ -x $peer ]] || { log "BENCH_PEER=$peer is not an executable"; exit 1; }
	grpc=$(free_port)
	http=$(free_port)
	debug=$(free_port)
	mkdir -p "$work/runtime/ratelimit/config"
	cp scripts/bench-reference.yaml "$work/runtime/ratelimit/config/bench.yaml"
	env -i PATH="$PATH" HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		LOG_LEVEL=error USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" CACHE_KEY_PREFIX=ref: \
		RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		"$peer" >"$work/reference.log" 2>&1 &
	pids+=($!)
	pid[reference]=$!
	wait_for "$work/envoy-rls" healthcheck -grpc-addr "127.0.0.1:$grpc" -service ratelimit
	addr[reference]=127.0.0.1:$grpc
}
redis_url=redis://127.0.0.1:$redis_port/0
for t in $targets; do
	case $t in
	null) ;;
	memory) start_rls memory ;;
	redis) start_rls redis -store redis -redis-url "$redis_url" ;;
	redis-unbatched) start_rls redis-unbatched -store redis -redis-url "$redis_url" -redis-batch-requests 0 -redis-pipeline-limit 0 -redis-key-prefix rlsu: ;;
	redis-local) start_rls redis-local -store redis -redis-url "$redis_url" -sync-interval "$sync_interval" -redis-key-prefix rlsl: ;;
	redis-pipelined) start_rls redis-pipelined -store redis -redis-url "$redis_url" -redis-batch-requests 0 -redis-key-prefix rlsp: ;;
	reference) start_reference ;;
	*) log "unknown target $t"; exit 1 ;;
	esac
done
used_before=$(rcli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}')

# top_commands prints the calls Redis has counted of the commands a client
# sent: all but those only the scripts call, and INFO (this script's own).
top_commands() {
	rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
		/^cmdstat_/ { name = substr($1, 9); if (name !~ /^(get|set|del|time|info)$/) n += $3 }
		END { print n + 0 }'
}

# cpu_us PID prints the CPU time, user and system, a process has used (µs).
hz=$(getconf CLK_TCK)
cpu_us() { awk -v hz="$hz" '{ printf "%d", ($14 + $15) * 1000000 / hz }' "/proc/$1/stat"; }

# field NAME reads a column of a tsv report by its header.
field() {
	awk -F'\t' -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i } NR == 2 { print $col[name] }' "$2"
}

echo -e "target\tround\trps\tp50_us\tp99_us\terrors\tover_limit\tcmds_per_req\tload_cpu\tserver_cpu\tredis_cpu" >"$work/runs.tsv"
for round in $(seq "$rounds"); do
	for t in $targets; do
		before=$(top_commands)
		server0=$(cpu_us "${pid[$t]}")
		redis0=$(cpu_us "$redis_pid")
		"$work/rls-bench" load -addr "${addr[$t]}" -duration "$duration" -warmup "$warmup" \
			-c "$concurrency" -conns "$conns" -keys "$keys" -descriptor "$descriptor" -format tsv >"$work/out.tsv"
		server1=$(cpu_us "${pid[$t]}")
		redis1=$(cpu_us "$redis_pid")
		after=$(top_commands)
		sent=$(field sent "$work/out.tsv")
		per="-"
		if [[ $t == redis* || $t == reference ]]; then
			per=$(awk -v d=$((after - before)) -v n="$sent" 'BEGIN { printf "%.3f", d / n }')
		fi
		server_cpu=$(awk -v d=$((server1 - server0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }')
		redis_cpu=$(awk -v d=$((redis1 - redis0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }')
		row="$t\t$round\t$(field rps "$work/out.tsv")\t$(field p50_us "$work/out.tsv")\t$(field p99_us "$work/out.tsv")"
		row+="\t$(field errors "$work/out.tsv")\t$(field over_limit "$work/out.tsv")\t$per"
		row+="\t$(field cpu_us_per_call "$work/out.tsv")\t$server_cpu\t$redis_cpu"
		echo -e "$row" >>"$work/runs.tsv"
		log "round $round/$rounds $t: $(field rps "$work/out.tsv") req/s, p99 $(field p99_us "$work/out.tsv") µs"
	done
done

# Redis memory per bucket: MEMORY USAGE of a sample of the keys, and the
# growth of used_memory (which adds Redis's hash tables and expiry index).
buckets=$(rcli dbsize)
used_after=$(rcli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}')
sample=0
usage=0
if [[ $buckets -gt 0 ]]; then
	read -r sample usage < <(rcli --scan | head -n 2000 |
		awk '{ printf "MEMORY USAGE \"%s\"\n", $0 }' | rcli | awk '{ n++; s += $1 } END { printf "%d %.1f\n", n, s / n }')
fi

echo
echo "envoy-rls benchmark: $(nproc) CPUs, Redis $redis_version; c=$concurrency over $conns connections," \
	"$keys keys, descriptor $descriptor; $rounds rounds of $duration (after $warmup warmup); medians"
echo
awk -F'\t' -v targets="$targets" '
	function median(list, n,   i, j, t, a) {
		split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	NR > 1 {
		k = $1; n[k]++
		rps[k] = rps[k] " " $3; p50[k] = p50[k] " " $4; p99[k] = p99[k] " " $5
		r_rps[k, $2] = $3; r_p99[k, $2] = $5; rounds[$2] = 1
		err[k] += $6; over[k] += $7
		if ($8 != "-") cmds[k] = cmds[k] " " $8
		lc[k] = lc[k] " " $9; sc[k] = sc[k] " " $10; rc[k] = rc[k] " " $11
	}
	END {
		printf "%-16s %9s %8s %9s %9s %8s %7s %10s   %s\n", "target", "req/s", "vs null", "p50 ms", "p99 ms", "p99/null", "errors", "cmds/req", "CPU µs/req: load server redis"
		nt = split(targets, ts, " ")
		for (i = 1; i <= nt; i++) {
			k = ts[i]
			r = median(rps[k], n[k]); q50 = median(p50[k], n[k]); q99 = median(p99[k], n[k])
			c = (k in cmds) ? sprintf("%.3f", median(cmds[k], n[k])) : "-"
			# Ratios to the null server of the same round, then their median.
			vs = "-"; v99 = "-"
			if ("null" in n) {
				ratios = ""; ratios99 = ""; m = 0
				for (rd in rounds) {
					ratios = ratios " " r_rps[k, rd] / r_rps["null", rd]
					ratios99 = ratios99 " " r_p99[k, rd] / r_p99["null", rd]
					m++
				}
				vs = sprintf("%.0f%%", 100 * median(ratios, m)); v99 = sprintf("%.2fx", median(ratios99, m))
			}
			cpu = sprintf("%5.1f %6.1f %5.1f", median(lc[k], n[k]), median(sc[k], n[k]), median(rc[k], n[k]))
			printf "%-16s %9.0f %8s %9.2f %9.2f %8s %7d %10s   %s\n", k, r, vs, q50 / 1000, q99 / 1000, v99, err[k], c, cpu
		}
	}' "$work/runs.tsv"
echo
if [[ $buckets -gt 0 ]]; then
	echo "Redis memory per bucket: $usage bytes (MEMORY USAGE, mean of $sample keys);" \
		"$(( (used_after - used_before) / buckets )) bytes of used_memory growth per key ($buckets keys)"
fi
if [[ -n ${BENCH_KEEP:-} ]]; then
	cp "$work/runs.tsv" "$BENCH_KEEP"
	log "per-run figures in $BENCH_KEEP"
fi
