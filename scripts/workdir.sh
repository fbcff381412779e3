# workdir.sh is sourced by the scripts that start servers: work, a
# directory removed on exit, and pids, the background processes killed
# then.
work=$(mktemp -d)
pids=()
cleanup_work() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup_work EXIT
