# shellcheck shell=bash
# Waiting for a server without an exec (sourced by the bench sweeps and the shim's tests).
# Under TCG an exec costs 50-150 ms of a one-CPU guest: a loop of ss, grep and sleep ten
# times a second takes the CPU the server it waits for is starting on.

# nap SECONDS: sleep(1) as a builtin, a read that times out on a pipe no one writes
# (opened per call, so no program started later inherits it).
nap() { read -r -t "$1" _ <> <(:) || true; }

# tcp_listening PORT [TABLE...]: whether a TCP socket listens on PORT, by the kernel's
# socket tables (default /proc/net/tcp and tcp6; a listener's state is 0A).
tcp_listening() {
	local hex f _ local_addr _r state port=$1
	shift
	printf -v hex ':%04X' "$port"
	[ $# -gt 0 ] || set -- /proc/net/tcp /proc/net/tcp6
	for f in "$@"; do
		[ -r "$f" ] || continue
		while read -r _ local_addr _r state _; do
			[ "$state" = 0A ] && [[ $local_addr == *"$hex" ]] && return 0
		done <"$f"
	done
	return 1
}

# wait_tcp PORT PID: until a TCP socket listens on PORT or PID exits, 30 s at most.
wait_tcp() {
	local i
	for ((i = 0; i < 300; i++)); do
		tcp_listening "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		nap 0.1
	done
	return 1
}
