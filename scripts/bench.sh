#!/usr/bin/env bash
# Measures envoy-rls against the ceiling gRPC alone allows on this machine,
# in one run, under several traffic shapes ("workloads"): it starts Redis
# and rls-bench's null server, then for each workload envoy-rls (memory
# store; Redis store; local-first at each sync interval) and the reference
# if asked, drives each with the same load, counts Redis commands per
# request and Redis memory per bucket, stops them and empties Redis; it
# prints a table per workload with ratios to the null ceiling and to the
# memory store. The workload rlqs is Envoys reporting RLQS buckets instead
# (rls-bench rlqs), with RLS calls on the same buckets beside for
# comparison. See docs/performance.md.
#
# Needs Linux (/proc, for the CPU each process spends), go, redis-server and
# redis-cli. Settings (environment):
#   BENCH_WORKLOADS ('turn:10000 turn:1000000 zipf1.1:1000000'): PICK[:KEYS]
#     each, PICK uniform, turn or zipfS (S the Zipf exponent, above 1), as
#     rls-bench load's -pick; KEYS BENCH_KEYS (10000) when left out; or
#     rlqs[:NxM[@INTERVAL]]: N Envoys (BENCH_RLQS_INSTANCES, 50), each on
#     its own stream, reporting the same M buckets (BENCH_RLQS_BUCKETS, 200,
#     BENCH_DESCRIPTOR's pairs) every INTERVAL (BENCH_RLQS_INTERVAL, 1s),
#     each bucket report counting about BENCH_RLQS_REQUESTS (100) requests,
#     for BENCH_RLQS_DURATION (BENCH_DURATION) after three intervals; then
#     RLS calls on the same M buckets in turn, as the RLS workloads run, on
#     the same target. It runs on the targets that serve RLQS: all but
#     reference (null answers every bucket at once, dividing nothing: the
#     ceiling gRPC allows)
#   BENCH_DURATION (10s)  BENCH_WARMUP (2s)  BENCH_ROUNDS (3)
#   BENCH_FIRST_WARMUP (8s: the warmup of each workload's first round)
#   BENCH_CONCURRENCY (64)  BENCH_CONNS (4)
#   BENCH_DESCRIPTOR ('user=u%d,action=a%d')
#   BENCH_SYNC_INTERVALS ('100ms 1s': a local-first target local-X, with
#     -sync-interval X, for each)
#   BENCH_TARGETS ('null memory redis' and the local-X targets, and
#     reference when BENCH_PEER names an envoyproxy/ratelimit binary:
#     docs/performance.md says how to build one). On request: local-X for
#     any interval X; redis-leaf (exact, -match leaf: the deepest level
#     only, as the reference counts); redis-unbatched (batching and
#     pipelining off);
#     redis-pipelined (a script call per request, in pipelines); redis-local
#     (local-first at BENCH_SYNC_INTERVAL, 1s); memory-page (memory with the
#     admin address and its operator's page on, counting what the page
#     shows: beside memory, the page's cost)
#   BENCH_KEEP (a file to copy the per-run figures to, runs.tsv, and those
#     of rlqs workloads to runs-rlqs.tsv beside it; also keeps the logs)
#   BENCH_PLOT (an SVG file to draw req/s per workload and target in, with
#     rls-bench bars; RLS workloads only)
# Targets run in turn within each round, so that a slower spell of a shared
# machine touches them all; the table shows each figure's median over rounds,
# and each ratio is the median of the ratios of a round.
set -euo pipefail

duration=${BENCH_DURATION:-10s}
warmup=${BENCH_WARMUP:-2s}
# The first round of a workload warms its fresh servers longer: a
# local-first replica needs a few sync intervals to lease its hot buckets.
first_warmup=${BENCH_FIRST_WARMUP:-8s}
rounds=${BENCH_ROUNDS:-3}
concurrency=${BENCH_CONCURRENCY:-64}
conns=${BENCH_CONNS:-4}
keys=${BENCH_KEYS:-10000}
descriptor=${BENCH_DESCRIPTOR:-'user=u%d,action=a%d'}
peer=${BENCH_PEER:-}
workloads=${BENCH_WORKLOADS:-turn:10000 turn:1000000 zipf1.1:1000000}
rlqs_instances=${BENCH_RLQS_INSTANCES:-50}
rlqs_buckets=${BENCH_RLQS_BUCKETS:-200}
rlqs_interval=${BENCH_RLQS_INTERVAL:-1s}
rlqs_requests=${BENCH_RLQS_REQUESTS:-100}
rlqs_duration=${BENCH_RLQS_DURATION:-$duration}
sync_interval=${BENCH_SYNC_INTERVAL:-1s}
sync_intervals=${BENCH_SYNC_INTERVALS:-100ms 1s}
default_targets="null memory redis"
for iv in $sync_intervals; do default_targets+=" local-$iv"; done
if [[ -n $peer ]]; then default_targets+=" reference"; fi
targets=${BENCH_TARGETS:-$default_targets}
keep=${BENCH_KEEP:-}
plot=${BENCH_PLOT:-}
# Files named relative to where the script is run from.
if [[ -n $keep && $keep != /* ]]; then keep=$PWD/$keep; fi
if [[ -n $plot && $plot != /* ]]; then plot=$PWD/$plot; fi

cd "$(dirname "$0")/.."

log() { echo "bench: $*" >&2; }

for tool in go redis-server redis-cli; do
	command -v "$tool" >/dev/null || { log "$tool is not on PATH"; exit 1; }
done
for t in $targets; do
	case $t in
	null | memory | memory-page | redis | redis-leaf | redis-unbatched | redis-pipelined | redis-local | local-?*) ;;
	reference) [[ -x $peer ]] || { log "target reference: BENCH_PEER=$peer is not an executable"; exit 1; } ;;
	*) log "unknown target $t"; exit 1 ;;
	esac
done

# parse_workload SPEC sets wl (the workload's name, PICK:KEYS), wl_keys
# and wl_flags (rls-bench load's flags for its pick), or fails. For an
# RLQS workload it sets wl (rlqs:NxM@INTERVAL), wl_kind rlqs, rlqs_n,
# rlqs_m and rlqs_iv; wl_kind is rls for the others.
parse_workload() {
	local spec=$1 pick s
	pick=${spec%%:*}
	wl_kind=rls
	if [[ $pick == rlqs ]]; then
		wl_kind=rlqs rlqs_n=$rlqs_instances rlqs_m=$rlqs_buckets rlqs_iv=$rlqs_interval
		s=${spec#rlqs}
		s=${s#:}
		if [[ $s == *@* ]]; then rlqs_iv=${s#*@} s=${s%%@*}; fi
		if [[ -n $s ]]; then rlqs_n=${s%%x*} rlqs_m=${s#*x}; fi
		if ! [[ $rlqs_n =~ ^[1-9][0-9]*$ && $rlqs_m =~ ^[1-9][0-9]*$ && $rlqs_iv =~ ^[0-9.]+(ms|s|m)$ ]]; then
			log "workload $spec: want rlqs[:NxM[@INTERVAL]], as rlqs:50x200@1s"
			exit 1
		fi
		wl=rlqs:${rlqs_n}x$rlqs_m@$rlqs_iv
		return
	fi
	wl_keys=$keys
	if [[ $spec == *:* ]]; then wl_keys=${spec#*:}; fi
	[[ $wl_keys =~ ^[1-9][0-9]*$ ]] || { log "workload $spec: KEYS must be a whole number above 0"; exit 1; }
	case $pick in
	uniform | turn) wl_flags=(-pick "$pick") ;;
	zipf*)
		s=${pick#zipf}
		if ! [[ $s =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v s="$s" 'BEGIN { exit !(s + 0 > 1) }'; then
			log "workload $spec: the Zipf exponent must be a number above 1, as in zipf1.1"
			exit 1
		fi
		wl_flags=(-pick zipf -zipf-s "$s")
		;;
	*) log "workload $spec: want PICK[:KEYS], PICK uniform, turn or zipfS (zipf1.1)"; exit 1 ;;
	esac
	wl=$pick:$wl_keys
}
seen=" "
for spec in $workloads; do
	parse_workload "$spec"
	[[ $seen != *" $wl "* ]] || { log "workload $wl is listed twice"; exit 1; }
	seen+="$wl "
done
[[ $seen != " " ]] || { log "BENCH_WORKLOADS is empty"; exit 1; }
# The targets of rlqs workloads: those that serve RLQS.
rlqs_targets=""
for t in $targets; do
	if [[ $t != reference ]]; then rlqs_targets+=" $t"; fi
done

work=$(mktemp -d)
redis_pid=""
declare -A addr pid
cleanup() {
	for p in "${pid[@]}" $redis_pid; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n $keep ]]; then log "logs in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# shellcheck source=ports.sh
source scripts/ports.sh

# shellcheck source=wait.sh
source scripts/wait.sh

log "building"
go build -o "$work/envoy-rls" ./cmd/envoy-rls
go build -o "$work/rls-bench" ./cmd/rls-bench

free_port redis_port
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
rcli() { redis-cli -p "$redis_port" "$@"; }
wait_for "$redis_pid" rcli ping || exit 1
redis_version=$(rcli info server | tr -d '\r' | awk -F: '$1 == "redis_version" {print $2}')
used_memory() { rcli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }

"$work/rls-bench" null -listen 127.0.0.1:0 >"$work/null.out" 2>&1 &
pid[null]=$!
wait_for "${pid[null]}" grep -q "listening on" "$work/null.out" || exit 1
addr[null]=$(awk '/listening on/ {print $3}' "$work/null.out")

# start_rls NAME FLAGS... starts envoy-rls and waits until it serves.
start_rls() {
	local name=$1 grpc http
	shift
	free_port grpc
	free_port http
	"$work/envoy-rls" -config scripts/bench.yaml -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" -admin-addr "" \
		-watch-config=false "$@" >"$work/$wl_n-$name.log" 2>&1 &
	pid[$name]=$!
	if ! wait_for "${pid[$name]}" "$work/envoy-rls" healthcheck -grpc-addr "127.0.0.1:$grpc"; then
		tail -n 5 "$work/$wl_n-$name.log" >&2
		exit 1
	fi
	addr[$name]=127.0.0.1:$grpc
}
# start_reference starts envoyproxy/ratelimit ($peer), set by its
# environment variables as it is deployed, on the same Redis under keys of
# its own, and waits until it serves.
start_reference() {
	local grpc http debug
	free_port grpc
	free_port http
	free_port debug
	mkdir -p "$work/runtime/ratelimit/config"
	cp scripts/bench-reference.yaml "$work/runtime/ratelimit/config/bench.yaml"
	env -i PATH="$PATH" HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		LOG_LEVEL=error USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" CACHE_KEY_PREFIX=ref: \
		RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		"$peer" >"$work/$wl_n-reference.log" 2>&1 &
	pid[reference]=$!
	if ! wait_for "${pid[reference]}" "$work/envoy-rls" healthcheck -grpc-addr "127.0.0.1:$grpc" -service ratelimit; then
		tail -n 5 "$work/$wl_n-reference.log" >&2
		exit 1
	fi
	addr[reference]=127.0.0.1:$grpc
}
redis_url=redis://127.0.0.1:$redis_port/0
# start_targets starts every target of the workload (wl_targets) but the
# null server, which stays up.
start_targets() {
	local t admin
	for t in $wl_targets; do
		case $t in
		null) ;;
		memory) start_rls memory ;;
		memory-page)
			free_port admin
			start_rls "$t" -admin-addr "127.0.0.1:$admin" -admin-page=true
			;;
		redis) start_rls redis -store redis -redis-url "$redis_url" ;;
		redis-unbatched) start_rls "$t" -store redis -redis-url "$redis_url" -redis-batch-requests 0 -redis-pipeline-limit 0 -redis-key-prefix rlsu: ;;
		redis-pipelined) start_rls "$t" -store redis -redis-url "$redis_url" -redis-batch-requests 0 -redis-key-prefix rlsp: ;;
		redis-leaf) start_rls "$t" -store redis -redis-url "$redis_url" -match leaf -redis-key-prefix rlsleaf: ;;
		redis-local) start_rls "$t" -store redis -redis-url "$redis_url" -sync-interval "$sync_interval" -redis-key-prefix rlsl: ;;
		local-*) start_rls "$t" -store redis -redis-url "$redis_url" -sync-interval "${t#local-}" -redis-key-prefix "rlsl${t#local-}:" ;;
		reference) start_reference ;;
		esac
	done
}
# stop_targets stops them all and waits until they have exited (local-first
# gives its leases back to Redis on the way out).
stop_targets() {
	local t
	for t in $wl_targets; do
		if [[ $t != null ]]; then kill "${pid[$t]}" 2>/dev/null || true; fi
	done
	for t in $wl_targets; do
		if [[ $t != null ]]; then
			wait "${pid[$t]}" 2>/dev/null || true
			unset "pid[$t]"
		fi
	done
}
# uses_redis TARGET succeeds for the targets that keep their buckets in Redis.
uses_redis() { [[ $1 == redis* || $1 == local-* || $1 == reference ]]; }

# commands prints three counts of the calls Redis has run: the commands
# clients sent (all but those only the scripts call, and INFO, this
# script's own); all of them but INFO, the scripts' own calls included;
# and all but INFO and PING (which clients send while idle).
commands() {
	rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '
		/^cmdstat_/ {
			name = substr($1, 9)
			if (name == "info") next
			all += $3
			if (name !~ /^(get|set|del|time)$/) sent += $3
			if (name != "ping") busy += $3
		}
		END { print sent + 0, all + 0, busy + 0 }'
}
# settle INTERVAL waits until Redis has run no command but PING for six
# of a local-first target's sync intervals, and 2 s at least (up to a
# minute): the target goes on syncing after its run, giving back what it
# holds once its buckets have been idle for four intervals, and these calls
# would otherwise count in the next target's run.
settle() {
	local quiet_ms last now waited=0 since=0
	quiet_ms=$(awk -v d="$1" 'BEGIN {
		u = d; sub(/^[0-9.]+/, "", u); n = substr(d, 1, length(d) - length(u)) + 0
		ms = u == "ms" ? n : u == "s" ? n * 1000 : u == "m" ? n * 60000 : u == "h" ? n * 3600000 : 0
		printf "%d", (ms * 6 > 2000 ? ms * 6 : 2000) }')
	read -r _ _ last < <(commands)
	while ((since < quiet_ms)); do
		if ((waited >= 60000 && waited >= 2 * quiet_ms)); then
			log "Redis still busy $((waited / 1000)) s after a run"
			return
		fi
		sleep 0.25
		waited=$((waited + 250)) since=$((since + 250))
		read -r _ _ now < <(commands)
		if [[ $now != "$last" ]]; then since=0 last=$now; fi
	done
}

# cpu_us PID prints the CPU time, user and system, a process has used (µs).
hz=$(getconf CLK_TCK)
cpu_us() { awk -v hz="$hz" '{ printf "%d", ($14 + $15) * 1000000 / hz }' "/proc/$1/stat"; }

# field NAME reads a column of a tsv report by its header.
field() {
	awk -F'\t' -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i } NR == 2 { print $col[name] }' "$2"
}
# per TARGET N SENT prints N per request, or - for targets without Redis.
per() {
	if uses_redis "$1"; then awk -v d="$2" -v n="$3" 'BEGIN { printf "%.3f", d / n }'; else echo -; fi
}

# rlqs_rounds runs an RLQS workload's rounds on its targets, a row each
# in rlqs.tsv: rls-bench rlqs (which reads the target's CPU in /proc and
# Redis's INFO itself, over its measured span), then RLS calls on the same
# buckets, measured as the RLS workloads are.
rlqs_rounds() {
	local round t w f row redis_flags server0 server1 redis0 redis1 sent rls_redis out=$work/rlqs-out.tsv
	for round in $(seq "$rounds"); do
		for t in $wl_targets; do
			redis_flags=()
			if uses_redis "$t"; then redis_flags=(-redis "127.0.0.1:$redis_port"); fi
			"$work/rls-bench" rlqs -target "${addr[$t]}" -instances "$rlqs_n" -buckets "$rlqs_m" -interval "$rlqs_iv" \
				-duration "$rlqs_duration" -requests "$rlqs_requests" -bucket "$descriptor" -pid "${pid[$t]}" "${redis_flags[@]}" \
				-format tsv >"$out"
			w=$warmup
			if [[ $round == 1 ]]; then w=$first_warmup; fi
			server0=$(cpu_us "${pid[$t]}")
			redis0=$(cpu_us "$redis_pid")
			"$work/rls-bench" load -addr "${addr[$t]}" -duration "$duration" -warmup "$w" -c "$concurrency" -conns "$conns" \
				-keys "$rlqs_m" -pick turn -descriptor "$descriptor" -format tsv >"$work/out.tsv"
			server1=$(cpu_us "${pid[$t]}")
			redis1=$(cpu_us "$redis_pid")
			sent=$(field sent "$work/out.tsv")
			rls_redis=-
			if uses_redis "$t"; then rls_redis=$(awk -v d=$((redis1 - redis0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }'); fi
			row="$wl\t$t\t$round"
			for f in served_bucket_reports_per_s p50_us p99_us unanswered redis_calls_per_message redis_cmds_per_message \
				load_cpu_us_per_bucket_report server_cpu_us_per_bucket_report redis_cpu_us_per_bucket_report governed_per_s \
				server_cpu_ns_per_governed redis_cpu_ns_per_governed; do
				row+="\t$(field "$f" "$out")"
			done
			row+="\t$(field rps "$work/out.tsv")\t$(awk -v d=$((server1 - server0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }')\t$rls_redis"
			echo -e "$row" >>"$work/rlqs.tsv"
			log "$wl round $round/$rounds $t: $(field served_bucket_reports_per_s "$out") bucket reports/s served," \
				"p99 $(field p99_us "$out") µs, $(field server_cpu_us_per_bucket_report "$out") µs of service CPU each"
			case $t in
			local-*) settle "${t#local-}" ;;
			redis-local) settle "$sync_interval" ;;
			esac
		done
	done
}

declare -A memory_line
echo -e "workload\ttarget\tround\trps\tp50_us\tp99_us\terrors\tover_limit\tcmds_per_req\tall_cmds_per_req\tload_cpu\tserver_cpu\tredis_cpu" >"$work/runs.tsv"
echo -e "workload\ttarget\tround\tserved_per_s\tp50_us\tp99_us\tunanswered\tcalls_per_msg\tcmds_per_msg\tload_us\tserver_us\tredis_us\tgoverned_per_s\tserver_ns_per_req\tredis_ns_per_req\trls_rps\trls_server_us\trls_redis_us" >"$work/rlqs.tsv"
wl_n=0
for spec in $workloads; do
	parse_workload "$spec"
	wl_n=$((wl_n + 1))
	wl_targets=$targets
	if [[ $wl_kind == rlqs ]]; then wl_targets=$rlqs_targets; fi
	log "workload $wl: starting the targets"
	start_targets
	if [[ $wl_kind == rlqs ]]; then
		rlqs_rounds
		log "workload $wl: stopping the targets, emptying Redis"
		stop_targets
		rcli flushall >/dev/null
		continue
	fi
	used_before=$(used_memory)
	for round in $(seq "$rounds"); do
		for t in $targets; do
			read -r sent0 all0 _ < <(commands)
			server0=$(cpu_us "${pid[$t]}")
			redis0=$(cpu_us "$redis_pid")
			w=$warmup
			if [[ $round == 1 ]]; then w=$first_warmup; fi
			"$work/rls-bench" load -addr "${addr[$t]}" -duration "$duration" -warmup "$w" \
				-c "$concurrency" -conns "$conns" -keys "$wl_keys" "${wl_flags[@]}" -descriptor "$descriptor" \
				-format tsv >"$work/out.tsv"
			server1=$(cpu_us "${pid[$t]}")
			redis1=$(cpu_us "$redis_pid")
			read -r sent1 all1 _ < <(commands)
			sent=$(field sent "$work/out.tsv")
			server_cpu=$(awk -v d=$((server1 - server0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }')
			redis_cpu=$(awk -v d=$((redis1 - redis0)) -v n="$sent" 'BEGIN { printf "%.1f", d / n }')
			row="$wl\t$t\t$round\t$(field rps "$work/out.tsv")\t$(field p50_us "$work/out.tsv")\t$(field p99_us "$work/out.tsv")"
			row+="\t$(field errors "$work/out.tsv")\t$(field over_limit "$work/out.tsv")"
			row+="\t$(per "$t" $((sent1 - sent0)) "$sent")\t$(per "$t" $((all1 - all0)) "$sent")"
			row+="\t$(field cpu_us_per_call "$work/out.tsv")\t$server_cpu\t$redis_cpu"
			echo -e "$row" >>"$work/runs.tsv"
			log "$wl round $round/$rounds $t: $(field rps "$work/out.tsv") req/s, p99 $(field p99_us "$work/out.tsv") µs"
			case $t in
			local-*) settle "${t#local-}" ;;
			redis-local) settle "$sync_interval" ;;
			esac
		done
	done

	# Redis memory per bucket, of this workload's keys: MEMORY USAGE of a
	# sample of the keys, and the growth of used_memory (which adds Redis's
	# hash tables and expiry index).
	buckets=$(rcli dbsize)
	used_after=$(used_memory)
	memory_line[$wl]="Redis memory per bucket, of this workload's keys before emptying Redis: none (no key)"
	if [[ $buckets -gt 0 ]]; then
		read -r sample usage < <(rcli --scan | head -n 2000 |
			awk '{ printf "MEMORY USAGE \"%s\"\n", $0 }' | rcli | awk '{ n++; s += $1 } END { printf "%d %.1f\n", n, s / n }')
		memory_line[$wl]="Redis memory per bucket, of this workload's keys before emptying Redis: $usage bytes (MEMORY USAGE, mean of $sample keys);"
		memory_line[$wl]+=" $(((used_after - used_before) / buckets)) bytes of used_memory growth per key ($buckets keys)"
	fi
	log "workload $wl: stopping the targets, emptying Redis"
	stop_targets
	rcli flushall >/dev/null
done

# rlqs_table prints an RLQS workload's table: per target, the medians over
# rounds of its figures, and of each round's ratio of the CPU an RLS call
# costs the service and Redis to what a request governed by RLQS costs them;
# then each figure's spread over the rounds.
rlqs_table() {
	echo
	echo "workload $wl: $rlqs_n Envoys, each on its own stream, report the same $rlqs_m buckets every $rlqs_iv," \
		"about $rlqs_requests requests a bucket report, for $rlqs_duration (after three intervals); RLS beside: the $rlqs_m buckets in turn, c=$concurrency"
	awk -F'\t' -v targets="$rlqs_targets" -v wl="$wl" '
		function median(list, n,   i, j, t, a) {
			split(list, a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		function fmtn(v) { return v >= 100 ? sprintf("%.0f", v) : sprintf("%.3g", v) }
		# spread prints the lowest and the highest of list, times scale.
		function spread(list, scale,   a, i, m, lo, hi) {
			m = split(list, a, " ")
			if (!m) return "-"
			lo = hi = a[1] * scale
			for (i = 2; i <= m; i++) { if (a[i] * scale < lo) lo = a[i] * scale; if (a[i] * scale > hi) hi = a[i] * scale }
			return fmtn(lo) "-" fmtn(hi)
		}
		function add(k, name, v) { if (v != "-" && v != "") { vals[k, name] = vals[k, name] " " v; cnt[k, name]++ } }
		function med(k, name, fmt) { return cnt[k, name] ? sprintf(fmt, median(vals[k, name], cnt[k, name])) : "-" }
		function num(v) { return v == "-" || v == "" ? 0 : v }
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$col["workload"] == wl {
			k = $col["target"]; seen[k] = 1
			for (c in col) add(k, c, $col[c])
			# Per request governed by RLQS, and per RLS call: the service and Redis.
			rlqs = (num($col["server_ns_per_req"]) + num($col["redis_ns_per_req"])) / 1000
			rls = num($col["rls_server_us"]) + num($col["rls_redis_us"])
			if (rlqs > 0) add(k, "ratio", rls / rlqs)
			if (rls > 0) add(k, "even", (num($col["server_us"]) + num($col["redis_us"])) / rls)
		}
		END {
			printf "%-12s %9s %7s %7s %5s %9s %8s %7s %6s %10s %8s %10s %12s %9s %10s %12s %8s %7s\n", "target", "reports/s", "p50 ms", "p99 ms",
				"lost", "calls/msg", "cmds/msg", "load µs", "svc µs", "over null", "redis µs", "svc ns/req", "redis ns/req", "RLS req/s", "RLS svc µs",
				"RLS redis µs", "RLS/RLQS", "even at"
			nt = split(targets, ts, " ")
			for (i = 1; i <= nt; i++) {
				k = ts[i]
				if (!(k in seen)) continue
				over = "-"
				if (k != "null" && cnt["null", "server_us"] && cnt[k, "server_us"])
					over = sprintf("%.1f", median(vals[k, "server_us"], cnt[k, "server_us"]) - median(vals["null", "server_us"], cnt["null", "server_us"]))
				printf "%-12s %9s %7.2f %7.2f %5s %9s %8s %7s %6s %10s %8s %10s %12s %9s %10s %12s %8s %7s\n", k, med(k, "served_per_s", "%.0f"),
					med(k, "p50_us", "%f") / 1000, med(k, "p99_us", "%f") / 1000, med(k, "unanswered", "%d"), med(k, "calls_per_msg", "%.2f"),
					med(k, "cmds_per_msg", "%.0f"), med(k, "load_us", "%.1f"), med(k, "server_us", "%.1f"), over, med(k, "redis_us", "%.1f"),
					med(k, "server_ns_per_req", "%.0f"), med(k, "redis_ns_per_req", "%.0f"), med(k, "rls_rps", "%.0f"),
					med(k, "rls_server_us", "%.1f"), med(k, "rls_redis_us", "%.1f"), med(k, "ratio", "%.0fx"), med(k, "even", "%.1f")
			}
			print "spread over the rounds (lowest-highest):"
			for (i = 1; i <= nt; i++) {
				k = ts[i]
				if (!(k in seen)) continue
				printf "  %-12s reports/s %s, p99 ms %s, service µs/report %s, Redis µs/report %s; RLS service µs/req %s, Redis %s\n", k,
					spread(vals[k, "served_per_s"], 1), spread(vals[k, "p99_us"], 0.001), spread(vals[k, "server_us"], 1),
					spread(vals[k, "redis_us"], 1), spread(vals[k, "rls_server_us"], 1), spread(vals[k, "rls_redis_us"], 1)
			}
		}' "$work/rlqs.tsv"
	echo "reports/s: bucket reports served a second; lost: report messages not answered (in time); calls/msg and cmds/msg: Redis" \
		"script calls and all commands per report message; µs: CPU per bucket report, of the load tool, the service and Redis; over null:" \
		"the service's µs less the null server's (its own work, gRPC's left out); ns/req:" \
		"per request a bucket report counts; RLS: calls on the same buckets, CPU per call; RLS/RLQS: what an RLS call costs the service" \
		"and Redis over what a request RLQS governs does; even at: the requests a bucket report must count for RLQS to cost what RLS does"
}

echo
echo "envoy-rls benchmark: $(nproc) CPUs, Redis $redis_version; c=$concurrency over $conns connections," \
	"descriptor $descriptor; rounds: $rounds of $duration (after $warmup warmup, $first_warmup in the first) per workload, on fresh servers; medians"
for spec in $workloads; do
	parse_workload "$spec"
	if [[ $wl_kind == rlqs ]]; then
		rlqs_table
		continue
	fi
	case $wl in
	uniform:*) shape="keys at random" ;;
	turn:*) shape="keys in turn, each once per $wl_keys requests" ;;
	*) shape="Zipf-distributed keys, exponent ${wl_flags[3]}" ;;
	esac
	echo
	echo "workload $wl: $shape, $wl_keys keys"
	awk -F'\t' -v targets="$targets" -v wl="$wl" '
		function median(list, n,   i, j, t, a) {
			split(list, a, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		# ratio prints the median over rounds of the ratio of k to base,
		# times scale.
		function ratio(k, base, arr, scale, fmt,   rd, list, m) {
			if (!(base in n)) return "-"
			for (rd in rounds) if (arr[base, rd] > 0) { list = list " " arr[k, rd] / arr[base, rd]; m++ }
			return m ? sprintf(fmt, scale * median(list, m)) : "-"
		}
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$col["workload"] == wl {
			k = $col["target"]; rd = $col["round"]; n[k]++
			rps[k] = rps[k] " " $col["rps"]; p50[k] = p50[k] " " $col["p50_us"]; p99[k] = p99[k] " " $col["p99_us"]
			r_rps[k, rd] = $col["rps"]; r_p99[k, rd] = $col["p99_us"]; rounds[rd] = 1
			err[k] += $col["errors"]
			if ($col["cmds_per_req"] != "-") cmds[k] = cmds[k] " " $col["cmds_per_req"]
			if ($col["all_cmds_per_req"] != "-") all[k] = all[k] " " $col["all_cmds_per_req"]
			lc[k] = lc[k] " " $col["load_cpu"]; sc[k] = sc[k] " " $col["server_cpu"]; rc[k] = rc[k] " " $col["redis_cpu"]
		}
		END {
			printf "%-16s %9s %8s %9s %9s %9s %8s %7s %9s %12s   %s\n", "target", "req/s", "vs null", "vs memory", "p50 ms", "p99 ms",
				"p99/null", "errors", "cmds/req", "all cmds/req", "CPU µs/req: load server redis"
			nt = split(targets, ts, " ")
			for (i = 1; i <= nt; i++) {
				k = ts[i]
				if (!(k in n)) continue
				c = (k in cmds) ? sprintf("%.3f", median(cmds[k], n[k])) : "-"
				a = (k in all) ? sprintf("%.3f", median(all[k], n[k])) : "-"
				cpu = sprintf("%5.1f %6.1f %5.1f", median(lc[k], n[k]), median(sc[k], n[k]), median(rc[k], n[k]))
				printf "%-16s %9.0f %8s %9s %9.2f %9.2f %8s %7d %9s %12s   %s\n", k, median(rps[k], n[k]),
					ratio(k, "null", r_rps, 100, "%.0f%%"), ratio(k, "memory", r_rps, 100, "%.0f%%"),
					median(p50[k], n[k]) / 1000, median(p99[k], n[k]) / 1000, ratio(k, "null", r_p99, 1, "%.2fx"),
					err[k], c, a, cpu
			}
		}' "$work/runs.tsv"
	echo "${memory_line[$wl]}"
done

if [[ -n $keep ]]; then
	cp "$work/runs.tsv" "$keep"
	log "per-run figures in $keep"
	if (($(wc -l <"$work/rlqs.tsv") > 1)); then
		cp "$work/rlqs.tsv" "${keep%.tsv}-rlqs.tsv"
		log "per-run RLQS figures in ${keep%.tsv}-rlqs.tsv"
	fi
fi
# Only the RLS workloads have bars.
if [[ -n $plot ]] && (($(wc -l <"$work/runs.tsv") < 2)); then
	log "no RLS workload: no bar chart"
	plot=""
fi
if [[ -n $plot ]]; then
	of="median of $rounds rounds"
	if ((rounds == 1)); then of="1 round"; fi
	"$work/rls-bench" bars -in "$work/runs.tsv" -o "$plot" -title "envoy-rls: req/s by workload (c=$concurrency, $of)"
	log "bar chart in $plot"
fi
