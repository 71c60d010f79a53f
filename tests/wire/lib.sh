# shellcheck shell=bash
# Helpers for two-host tests (sourced on both hosts of scripts/sandbox --hosts 2).
# Both hosts walk the same list of steps; each step is a server on one host and a client
# on the other, kept in lockstep through files in $UNLOAD_PAIR_DIR. Host A judges.
. "$(dirname "${BASH_SOURCE[0]}")/../shim/sandbox/lib.sh"
# The result vocabulary (ok/FAIL/skip, check, finish) over the shim helpers' own.
# shellcheck source=tests/support/check.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/check.sh"
trap 'rm -rf "$WORK"' EXIT
ME=${UNLOAD_HOST:?not in a two-host sandbox}
PEER_ADDR=${UNLOAD_PEER_ADDR:?}
P=${UNLOAD_PAIR_DIR:?}
WL=$BUILD/tests/wire/wire_workload

# wait_file PATH [SECONDS]: until PATH exists (the other host wrote it).
wait_file() {
	local i
	for ((i = 0; i < ${2:-300} * 10; i++)); do
		[ -e "$1" ] && return 0
		nap 0.1
	done
	echo "    timed out waiting for $(basename "$1") from the other host"
	return 1
}

# put PATH VALUE: PATH holds VALUE, whole or not at all for the other host, which may read
# it the moment it exists (over 9p a plain write is a create, then a write).
put() {
	echo "$2" >"$1.$ME.tmp" && mv "$1.$ME.tmp" "$1"
}

# listening PROGRAM PID: until the server listens (18515 for perftest and
# ibv_rc_pingpong, 18600 for wire_workload, 18610 for remote_parity, 18620 for
# bench_write_lat --serve, 7174 for rping), or exits.
listening() {
	local port=18515
	case "$1" in
	rping) port=7174 ;;
	*wire_workload) port=18600 ;;
	*remote_parity) port=18610 ;;
	*bench_write_lat) port=18620 ;;
	esac
	wait_listen "$port" "$2"
}

# show_log FILE: a program's output for a failed step, without perftest's per-QP address
# lines (128 at 64 QPs), which would push the error out of CI's excerpt.
show_log() {
	local addr='^ *(local|remote) address:|^ *GID:' n
	n=$(grep -cE "$addr" "$1")
	grep -vE "$addr" "$1"
	((n == 0)) || echo "    ($n address lines left out)"
}

# step NAME SERVER_HOST SHIM_ENV -- SERVER_CMD... -- CLIENT_CMD...: one program pair,
# the server on SERVER_HOST (A or B), the client on the other. SHIM_ENV (words of
# VAR=value, or -) is the environment of host A's side, which runs under the shim with
# statistics in $WORK/NAME.stats (SHIM_ENV "noshim": no preload on A either); host B's
# side runs with no preload at all, unless STEP_ENV_B (words of VAR=value) is set: then it
# runs under the shim too, with that environment.
# On host A returns 0 when both sides exited 0 (logs in $WORK/NAME.{srv,cli}); a run
# that failed only because perftest could not measure the clock runs again (twice at
# most; STEP_RUNS says how many times it ran, for a check that counts what each run does).
# On host B always returns 0.
step() {
	local name=$1 srv_host=$2 shimenv=$3
	shift 3
	[ "$1" = -- ] && shift
	local srv=() cli=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	local envs=() attempt rc s cmd=() role
	if [ "$ME" = A ] && [ "$shimenv" != noshim ]; then
		envs=(LD_PRELOAD="$SHIM" UNLOAD_STATS_FILE="$WORK/$name.stats")
		if [ "$shimenv" != - ]; then
			local extra
			read -r -a extra <<<"$shimenv"
			envs+=("${extra[@]}")
		fi
	fi
	if [ "$ME" = B ] && [ -n "${STEP_ENV_B:-}" ]; then
		local extra_b
		read -r -a extra_b <<<"$STEP_ENV_B"
		envs=(LD_PRELOAD="$SHIM" "${extra_b[@]}")
	fi
	if [ "$ME" = "$srv_host" ]; then role=srv cmd=("${srv[@]}"); else role=cli cmd=("${cli[@]}"); fi
	# Builtins and subshells where a step passes: under TCG every exec costs 50-150 ms.
	for attempt in 1 2 3; do
		# shellcheck disable=SC2034  # read by the caller
		STEP_RUNS=$attempt
		local k=$P/$name.$attempt
		: >"$WORK/$name.stats"
		if [ $role = srv ]; then
			(((${#envs[@]})) && export "${envs[@]}"; exec timeout 150 "${cmd[@]}" >"$WORK/$name.$role" 2>&1) &
			s=$!
			listening "${cmd[0]}" $s
			: >"$k.ready"
			rc=0
			wait $s || rc=$?
		else
			rc=99
			if wait_file "$k.ready" 200; then
				rc=0
				(((${#envs[@]})) && export "${envs[@]}"; exec timeout 150 "${cmd[@]}" >"$WORK/$name.$role" 2>&1) || rc=$?
			fi
		fi
		copy_file "$WORK/$name.$role" "$k.$ME.log"
		put "$k.$ME.rc" "$rc"
		local other=B
		[ "$ME" = B ] && other=A
		wait_file "$k.$other.rc" 300 || return 1
		if [ "$ME" = B ]; then
			wait_file "$k.verdict" 300 || return 0
			local verdict
			read -r verdict <"$k.verdict"
			[ "$verdict" = again ] && continue
			return 0
		fi
		local orc
		read -r orc <"$k.$other.rc"
		if [ $role = srv ]; then copy_file "$k.$other.log" "$WORK/$name.cli"; else copy_file "$k.$other.log" "$WORK/$name.srv"; fi
		if [ "$rc" -eq 0 ] && [ "$orc" -eq 0 ]; then
			put "$k.verdict" "done"
			return 0
		fi
		if [ $attempt -lt 3 ] && perftest_clock_failed "$WORK/$name.srv" "$WORK/$name.cli"; then
			echo "    $name: perftest could not measure the CPU clock (r^2 < 0.9); again"
			put "$k.verdict" again
			continue
		fi
		put "$k.verdict" "done"
		echo "--- $name: host A ($role) rc=$rc, host B rc=$orc"
		echo "--- client:"; show_log "$WORK/$name.cli"
		echo "--- server:"; show_log "$WORK/$name.srv"
		return 1
	done
}
