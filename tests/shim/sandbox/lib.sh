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
# id, and ibv_rc_pingpong: port 18515; rping, a CM id: 7174; fio's rdma engine, a CM id:
# 7175; ucx_perftest: 13337) or exits.
wait_server() {
	case $1 in
	rping) wait_listen 7174 "$2" cm ;;
	fio) wait_listen 7175 "$2" cm ;;  # its rdma engine, at the port reach.sh gives it
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

# Timing against no shim (reach.sh, issue 54). Figures are printed, never checked.
# timed_pair NAME MODE SERVER... -- CLIENT...: run_pair, and the pair's wall time in
# microseconds (both programs' whole runs, start-up included) in $WORK/NAME.us, left
# empty when run_pair ran the pair again (a retry's time is not the program's). Builtins
# only: an exec of date(1) would add its 50-150 ms to what it times.
timed_pair() {
	local began=$EPOCHREALTIME out rc
	out=$(run_pair "$@")
	rc=$?
	local ended=$EPOCHREALTIME
	[ -n "$out" ] && echo "$out"
	: >"$WORK/$1.us"
	[[ $out == *"; again"* ]] || echo $((${ended/[.,]/} - ${began/[.,]/})) >"$WORK/$1.us"
	return $rc
}

# interleave NAME PAIRS SERVER... -- CLIENT...: PAIRS pairs of timed_pair runs, one without
# the shim ($WORK/NAME.none.I) and one in the default mode, the first pair's shim run being
# $WORK/NAME (made here unless the caller has timed it already, its checked run), the others
# $WORK/NAME.shim.I. Which goes first alternates: the shim in odd pairs. Returns 1 at the
# first run that failed (its logs shown).
interleave() {
	local name=$1 pairs=$2 i; shift 2
	[ -e "$WORK/$name.us" ] || timed_pair "$name" - "$@" || return 1
	for ((i = 1; i <= pairs; i++)); do
		if ((i % 2)); then
			((i == 1)) || timed_pair "$name.shim.$i" - "$@" || return 1
			timed_pair "$name.none.$i" none "$@" || return 1
		else
			timed_pair "$name.none.$i" none "$@" || return 1
			timed_pair "$name.shim.$i" - "$@" || return 1
		fi
	done
}

# perftest_figure LOG COLUMN: the value under COLUMN, named as perftest's header names it
# without the unit ("BW average", "t_typical"), in the result row of LOG; nothing if none.
# Header names may hold a space ("BW average[MB/sec]", "99% percentile[usec]"): a word
# with neither a unit nor a leading # joins the next.
perftest_figure() {
	local line words=() row=() names=() part="" w i
	[ -r "$1" ] || return 0
	while IFS= read -r line; do
		[[ $line == *'#bytes'* ]] || continue
		read -ra words <<<"$line"
		for w in "${words[@]}"; do
			part+=${part:+ }$w
			[[ $w == *'['* || $w == '#'* ]] || continue
			names+=("${part%%\[*}")
			part=""
		done
		IFS= read -r line || return 0
		read -ra row <<<"$line"
		for i in "${!names[@]}"; do
			[ "${names[i]}" = "$2" ] && { echo "${row[i]-}"; return 0; }
		done
		return 0
	done <"$1"
}

# ucx_figure LOG lat|bw: from ucx_perftest's Final line in LOG, the overall latency
# (usec) or the overall bandwidth (MB/s); nothing if there is no Final line.
ucx_figure() {
	local line _ lat bw
	[ -r "$1" ] || return 0
	while IFS= read -r line; do
		[[ $line == Final:* ]] || continue
		read -r _ _ _ _ lat _ bw _ <<<"$line"
		if [ "$2" = lat ]; then echo "$lat"; else echo "$bw"; fi
		return 0
	done <"$1"
}

# paired_ratio higher|lower NONE1 SHIM1 NONE2 SHIM2 ...: each pair's ratio, oriented so
# that above 1 the shim's run was faster (SHIM/NONE when higher figures are better,
# NONE/SHIM when lower are), as "MEDIAN (pairs: R1 R2 ..., MIN..MAX)". A pair with a
# figure missing, not a plain number (ib_write_lat once printed a t_typical of "inf") or
# not positive shows as "-" and counts for nothing.
paired_ratio() {
	awk 'function fig(x) { return x ~ /^([0-9]+\.?[0-9]*|\.[0-9]+)$/ && x + 0 > 0 }
	BEGIN {
		better = ARGV[1]
		for (i = 2; i + 1 < ARGC; i += 2) {
			a = ARGV[i] + 0; b = ARGV[i + 1] + 0
			if (!fig(ARGV[i]) || !fig(ARGV[i + 1])) { list = list " -"; continue }
			r[++n] = better == "higher" ? b / a : a / b
			list = list sprintf(" %.2f", r[n])
		}
		if (!n) { print "n/a (no pair measured)"; exit }
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && r[j - 1] > r[j]; j--) { t = r[j]; r[j] = r[j - 1]; r[j - 1] = t }
		m = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
		printf "%.2f (pairs:%s, %.2f..%.2f)\n", m, list, r[1], r[n]
	}' "$@"
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
