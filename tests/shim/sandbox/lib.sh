# Helpers for the shim's sandbox tests (sourced). Each check prints one result line
# (ok:, FAIL:, skip:; tests/support/check.sh).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../../support/check.sh"
# stat FILE KEY
. "$(dirname "${BASH_SOURCE[0]}")/../../support/stats.sh"
# nap, tcp_listening
. "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib/guest/waiting.sh"
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SHIM=$BUILD/shim/libunload_shim.so
BIN=$BUILD/tests/shim
WORK=$(mktemp -d /tmp/unload-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
DEV=${UNLOAD_TEST_DEV:-rxe0}
GIDX=${UNLOAD_TEST_GID:-1}
ADDR=${UNLOAD_TEST_ADDR:-192.0.2.1}

# Without the shim built there is nothing to test.
need_shim() { [ -e "$SHIM" ] || skip "no $SHIM"; }


# Files compared, copied and shown with builtins only: under TCG every exec costs 50-150 ms,
# and semantics.sh does these a few times a program run. Text files (no NUL bytes).
# same_file A B: whether A and B both exist and hold the same text.
same_file() {
	local a b
	[ -r "$1" ] && [ -r "$2" ] || return 1
	IFS= read -r -d '' a <"$1"
	IFS= read -r -d '' b <"$2"
	[ "$a" == "$b" ]
}
# copy_file A B: B becomes a copy of A.
copy_file() { local a; IFS= read -r -d '' a <"$1"; printf '%s' "$a" >"$2"; }
# file_has FILE STRING: whether FILE contains STRING (a fixed string, not a pattern).
file_has() { local a; [ -r "$1" ] || return 1; IFS= read -r -d '' a <"$1"; [[ $a == *"$2"* ]]; }
# indent PREFIX FILE: FILE's lines, each after PREFIX.
indent() {
	local l
	[ -r "$2" ] || return 0
	while IFS= read -r l || [ -n "$l" ]; do printf '%s%s\n' "$1" "$l"; done <"$2"
}

# wait_listen PORT PID [tcp|cm|any]: until a server listens on PORT, over TCP or on an RDMA
# CM id (which /proc/net cannot show but rdma(8) can), or PID exits. A fixed sleep is not
# enough under TCG when another guest shares the host's cores.
wait_listen() {
	local i kind=${3:-any}
	for ((i = 0; i < 300; i++)); do
		[ "$kind" != cm ] && tcp_listening "$1" && return
		[ "$kind" != tcp ] && rdma res show cm_id 2>/dev/null | grep -q "LISTEN.*:$1" && return
		kill -0 "$2" 2>/dev/null || return
		nap 0.1
	done
}

# wait_server PROGRAM PID: until the server listens (perftest, over TCP or with -R on a CM
# id, and ibv_rc_pingpong: port 18515; rping, a CM id: 7174; ucx_perftest: 13337) or exits.
wait_server() {
	case $1 in
	rping) wait_listen 7174 "$2" cm ;;
	ucx_perftest) wait_listen 13337 "$2" tcp ;;
	ibv_rc_pingpong) wait_listen 18515 "$2" tcp ;;
	*) wait_listen 18515 "$2" any ;;
	esac
}

# perftest_clock_failed LOG...: perftest gave up before its report because it could not
# measure the CPU clock (sample_get_cpu_mhz wants r^2 >= 0.9 over a busy-loop against
# gettimeofday, which a TCG guest sharing the host's cores can miss). That is the
# harness's clock, not a verbs failure: the writes and completions already happened.
perftest_clock_failed() { grep -q "Correlation coefficient r^2: .* < 0.9" "$@" 2>/dev/null; }

# cm_unheard LOG...: an rdma_cm client was rejected for want of a listener (reason
# 8, invalid service id): the server was not listening yet when wait_server gave up, on a
# loaded host. Nothing was posted.
# perftest words it "RDMA_CM_EVENT_REJECTED; error: 8.", rping "... REJECTED, error 8".
cm_unheard() { grep -Eq "RDMA_CM_EVENT_REJECTED(;|,) error:? 8\b" "$@" 2>/dev/null; }

# run_pair NAME MODE SERVER_CMD... -- CLIENT_CMD...: runs a server and a client under the
# shim in MODE (- for the module's; none: without the shim), both writing statistics to $WORK/NAME.stats; logs in
# $WORK/NAME.{srv,cli}.
# A pair that failed only because perftest could not measure the clock, or because an
# rdma_cm client came before the server listened, runs again (twice at most, said on a
# line of its own); any other failure stands. A retried attempt's statistics are kept in
# $WORK/NAME.stats.retried: its writes reached the module's counters too.
run_pair() {
	local name=$1 mode=$2; shift 2
	local srv=() cli=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	local attempt crc src envs=(LD_PRELOAD="$SHIM" UNLOAD_STATS_FILE="$WORK/$name.stats")
	[ "$mode" = none ] && envs=()
	[ "$mode" != - ] && [ "$mode" != none ] && envs+=(UNLOAD_MODE="$mode")
	: >"$WORK/$name.stats.retried"
	: >"$WORK/$name.stats"
	for attempt in 1 2 3; do
		if [ $attempt -gt 1 ]; then
			cat "$WORK/$name.stats" >>"$WORK/$name.stats.retried"
			: >"$WORK/$name.stats"
		fi
		# Subshells that export, not env(1): one exec fewer a process (and export with no
		# words would list the environment).
		(((${#envs[@]})) && export "${envs[@]}"; exec timeout 120 "${srv[@]}" >"$WORK/$name.srv" 2>&1) &
		local spid=$!
		wait_server "${srv[0]}" $spid
		(((${#envs[@]})) && export "${envs[@]}"; exec timeout 120 "${cli[@]}" >"$WORK/$name.cli" 2>&1)
		crc=$?
		local unheard=0
		if [ $crc -ne 0 ] && cm_unheard "$WORK/$name.cli"; then
			unheard=1
			kill "$spid" 2>/dev/null  # it would wait for a client until its timeout
		fi
		wait $spid
		src=$?
		[ $crc -eq 0 ] && [ $src -eq 0 ] && return 0
		if [ $unheard -eq 1 ]; then
			[ $attempt -lt 3 ] && echo "    $name: the client found no listener yet (rdma_cm reject 8); again"
			continue
		fi
		perftest_clock_failed "$WORK/$name.srv" "$WORK/$name.cli" || break
		[ $attempt -lt 3 ] && echo "    $name: perftest could not measure the CPU clock (r^2 < 0.9); again"
	done
	# Whole logs: stderr is unbuffered and stdout is not, so an error message sits above
	# the last lines of output.
	# Indented, so the failed-checks digest at the end of scripts/test carries them.
	echo "    --- $name: server rc=$src, client rc=$crc"
	echo "    --- server:"; sed 's/^/    /' "$WORK/$name.srv"
	echo "    --- client:"; sed 's/^/    /' "$WORK/$name.cli"
	return 1
}

show_stats() { echo "    $1: $(tr '\n' ' ' <"$WORK/$1.stats" 2>/dev/null)"; }

total_writes() { echo $(($(stat "$1" writes_offload) + $(stat "$1" writes_inline) + $(stat "$1" writes_stage) + $(placed_here "$1"))); }

# under MODE NAME CMD...: CMD under the shim (UNLOAD_MODE=MODE; empty: the module's mode),
# its outcome in $WORK/NAME.out, stderr in $WORK/NAME.err, statistics in $WORK/NAME.stats.
# Returns CMD's status; on a failure shows the outcome and the end of stderr.
under() {
	local mode=$1 name=$2; shift 2
	: >"$WORK/$name.stats"
	(
		export LD_PRELOAD="$SHIM" ${mode:+UNLOAD_MODE=$mode} UNLOAD_STATS_FILE="$WORK/$name.stats"
		exec timeout 600 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
	)
	local rc=$?
	[ $rc -eq 0 ] || { echo "    --- $name rc=$rc"; sed 's/^/    out | /' "$WORK/$name.out"; tail -5 "$WORK/$name.err" | sed 's/^/    err ! /'; }
	return $rc
}

# same_outcome MODE NAME PROG ARGS...: a semantics program ($BIN/sem_PROG) under the shim
# in MODE prints the outcome it prints without the shim (that reference run once per
# command line, kept in $WORK). One check, named "NAME MODE: outcome equals the reference".
same_outcome() {
	local mode=$1 name=$2 prog=$3; shift 3
	local ref rc
	ref="$prog $*"
	ref=$WORK/ref.${ref//[^A-Za-z0-9_.-]/_}
	if [ ! -e "$ref" ]; then
		timeout 600 "$BIN/sem_$prog" "$@" >"$ref.tmp" 2>"$ref.err"
		rc=$?
		[ $rc -eq 77 ] && { skip_check "$name ${mode:-sysfs}" "$(grep -m1 '^skip:' "$ref.tmp")"; rm -f "$ref.tmp"; return 0; }
		[ $rc -eq 0 ] || { fail "$name ${mode:-sysfs}" "the reference run (no shim) of sem_$prog $* ended rc=$rc"
			sed 's/^/    ref | /' "$ref.tmp"; tail -5 "$ref.err" | sed 's/^/    ref ! /'; rm -f "$ref.tmp"; return 1; }
		mv "$ref.tmp" "$ref"
	fi
	if under "$mode" "$name" "$BIN/sem_$prog" "$@" && same_file "$ref" "$WORK/$name.out"; then
		ok "$name ${mode:-sysfs}: outcome equals the reference" "sem_$prog${*:+ $*}"
		return 0
	fi
	fail "$name ${mode:-sysfs}" "outcome differs from the reference (sem_$prog $*)"
	diff "$ref" "$WORK/$name.out" | head -20 | sed 's/^/    diff /'
	return 1
}
