# Helpers for the shim's sandbox tests (sourced). Each check prints one result line.
set -u
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SHIM=$BUILD/shim/libunload_shim.so
WORK=$(mktemp -d /tmp/unload-test.XXXXXX)
FAILS=0
DEV=${UNLOAD_TEST_DEV:-rxe0}
GIDX=${UNLOAD_TEST_GID:-1}
ADDR=${UNLOAD_TEST_ADDR:-192.0.2.1}

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# check "description" command...: passes when the command succeeds.
check() { local d=$1; shift; if "$@"; then pass "$d"; else fail "$d"; fi; }

# stat FILE KEY: the sum of KEY over every process block in a UNLOAD_STATS_FILE.
stat() { awk -v k="$2" '$1 == k { s += $2 } END { print s + 0 }' "$1" 2>/dev/null || echo 0; }

# wait_server PROGRAM PID: until the server listens (perftest and ibv_rc_pingpong: TCP
# 18515; rping listens through the RDMA CM, which ss cannot see) or exits. A fixed sleep
# is not enough under TCG when another guest shares the host's cores.
wait_server() {
	if [ "$1" = rping ]; then sleep "${SERVER_WAIT:-2}"; return; fi
	for _ in $(seq 300); do
		ss -ltnH 'sport = :18515' 2>/dev/null | grep -q . && return
		kill -0 "$2" 2>/dev/null || return
		sleep 0.1
	done
}

# run_pair NAME MODE SERVER_CMD... -- CLIENT_CMD...: runs a server and a client under the
# shim in MODE, both writing statistics to $WORK/NAME.stats; logs in $WORK/NAME.{srv,cli}.
run_pair() {
	local name=$1 mode=$2; shift 2
	local srv=() cli=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	rm -f "$WORK/$name.stats"
	env LD_PRELOAD="$SHIM" UNLOAD_MODE="$mode" UNLOAD_STATS_FILE="$WORK/$name.stats" \
		timeout 120 "${srv[@]}" >"$WORK/$name.srv" 2>&1 &
	local spid=$!
	wait_server "${srv[0]}" $spid
	env LD_PRELOAD="$SHIM" UNLOAD_MODE="$mode" UNLOAD_STATS_FILE="$WORK/$name.stats" \
		timeout 120 "${cli[@]}" >"$WORK/$name.cli" 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		echo "--- $name: server rc=$src, client rc=$crc"
		tail -n 15 "$WORK/$name.srv" "$WORK/$name.cli"
		return 1
	fi
	return 0
}

show_stats() { echo "    $1: $(tr '\n' ' ' <"$WORK/$1.stats" 2>/dev/null)"; }

finish() {
	rm -rf "$WORK"
	if [ "$FAILS" -ne 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
	echo "all checks passed"
	exit 0
}
