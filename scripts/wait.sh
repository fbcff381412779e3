# wait.sh is sourced by the scripts that start servers; log is theirs.

# wait_for PID COMMAND... runs COMMAND until it succeeds, for up to 10 s,
# and fails at once if process PID has exited.
wait_for() {
	local p=$1
	shift
	for _ in $(seq 100); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		kill -0 "$p" 2>/dev/null || { log "exited before it was ready: process $p, waiting for: $*"; return 1; }
		sleep 0.1
	done
	log "gave up waiting for: $*"
	return 1
}
