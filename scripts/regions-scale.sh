#!/usr/bin/env bash
# Measures what the exchange between regions costs (docs/regions.md) when
# every region uses many buckets every interval: it starts a Redis for each
# region on a free loopback port, and runs rls-bench regions on them (each
# region's exchange wired as envoy-rls wires it, in one process; the
# buckets fed through Asked and the region's store wrapper, over a store
# that admits everything), which prints the exchanges' CPU on the service
# and on each Redis, their bytes and wall time, and whether the claims
# were divided. See docs/performance.md.
#
# Needs Linux (/proc, getrusage), go, redis-server and redis-cli. Settings:
#   SCALE_REGIONS (3)  SCALE_REPLICAS (1)  SCALE_BUCKETS (100000)
#   SCALE_INTERVAL (1s)  SCALE_DURATION (20s)  SCALE_BASELINE (10s)
#   SCALE_PROFILE (a file for a CPU profile of the measured exchanges)
# Extra arguments go to rls-bench regions (-format json, say).
set -euo pipefail

regions=${SCALE_REGIONS:-3}
replicas=${SCALE_REPLICAS:-1}
buckets=${SCALE_BUCKETS:-100000}
interval=${SCALE_INTERVAL:-1s}
duration=${SCALE_DURATION:-20s}
baseline=${SCALE_BASELINE:-10s}
profile=${SCALE_PROFILE:-}
if [[ -n $profile && $profile != /* ]]; then profile=$PWD/$profile; fi

cd "$(dirname "$0")/.."
# shellcheck source=ports.sh
source scripts/ports.sh
# shellcheck source=workdir.sh
source scripts/workdir.sh
# shellcheck source=wait.sh
source scripts/wait.sh

log() { echo "regions-scale: $*" >&2; }
for tool in go redis-server redis-cli; do
	command -v "$tool" >/dev/null || { log "$tool is not on PATH"; exit 1; }
done

log "building"
go build -o "$work/rls-bench" ./cmd/rls-bench

urls=()
for i in $(seq "$regions"); do
	free_port port
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no >"$work/redis-$i.log" 2>&1 &
	pids+=($!)
	wait_for "${pids[-1]}" redis-cli -p "$port" ping || exit 1
	urls+=("redis://127.0.0.1:$port/0")
done
log "$regions Redis up; measuring ($baseline of feeding alone, then $duration of exchanges)"

args=(-redis "$(IFS=,; echo "${urls[*]}")" -replicas "$replicas" -buckets "$buckets" -interval "$interval"
	-duration "$duration" -baseline "$baseline")
# The CPU profile attributes the process's CPU to the exchanges directly
# (their Publish and Divide calls, what they call included), a second
# figure beside rls-bench's, which subtracts the feeding measured alone
# and so carries the noise of two measurements on a shared machine.
profile=${profile:-$work/exchange.prof}
args+=(-cpuprofile "$profile")
"$work/rls-bench" regions "${args[@]}" "$@"
go tool pprof -top -cum "$work/rls-bench" "$profile" 2>/dev/null | awk -v regions="$regions" -v replicas="$replicas" '
	function secs(v) { if (v ~ /ms$/) return v / 1000; if (v ~ /us$/) return v / 1e6; return v + 0 }
	/^Duration:/ { d = secs($2) }
	/\(\*Exchange\)\.(Publish|Divide)$/ { cpu += secs($4) }
	END { if (d > 0) printf "by profile     the exchanges (Publish and Divide) %.3f cores, %.3f cores a region (%d replicas)\n", cpu / d, cpu / d / regions, replicas }'

