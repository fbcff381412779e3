# ports.sh is sourced by the scripts that start servers on loopback ports.

# free_port VAR sets VAR to a loopback port nothing listens on, below the
# range the kernel takes the ports of outgoing connections from (a port
# there may be bound by a connection though nothing listens on it), and
# not given before.
read -r ephemeral _ </proc/sys/net/ipv4/ip_local_port_range
port_span=$((ephemeral > 12000 ? ephemeral - 10000 : 20000))
declare -A ports_given
free_port() {
	local p
	while :; do
		p=$((10000 + RANDOM % port_span))
		if [[ -z ${ports_given[$p]:-} ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			ports_given[$p]=1
			printf -v "$1" %d "$p"
			return
		fi
	done
}
