#!/bin/bash
# The module's limits in one boot: nothing a submitter's faults hold stalls anyone else
# (kmod_limits stall), and memory is charged once (kmod_limits memlock without the shim
# and under it, UNLOAD_MODE=unload: its writes go direct, as uid 65534 with an 8 MiB
# RLIMIT_MEMLOCK); stats/ holds only what the module counted, whatever a session writes
# on its counters page (kmod_limits counters); per-user bounds on sessions and
# registrations (kmod_limits users); then kmod_safety's groups: charges once per process, arenas charged
# while mapped, a responder moved to ERR mid-batch, other users' UNREG_QP, a responder destroyed
# unannounced while its sender streams, MR churn and
# memory windows; then kmod_mapped's groups: the mapped path's grant, revocation, ptrace
# rule and race (each group's checks are its own lines; a group's skip is a skip).
# Usage: limits_test.sh <kmod_limits binary> [<kmod_safety binary> [<kmod_mapped binary>]]
set -u
. "$(dirname "$0")/../support/check.sh"
BIN=$1
SAFETY=${2:-}
MAPPED=${3:-}
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SHIM=$BUILD/shim/libunload_shim.so
[ -e /dev/unload ] || skip "no /dev/unload (module not loaded)"
[ -e "$SHIM" ] || skip "no $SHIM"
# Each stall run ends with `rdma link delete rxe0`: the device comes back for the next.
relink() { rdma link show 2>/dev/null | grep -q ' netdev d0' || rdma link add rxe0 type rxe netdev d0; }
# run MODE: kmod_limits MODE, its status as one more check.
run() {
	echo "== $1"
	"$BIN" "$1"
	case $? in
	0) ok "$1" ;;
	77) skip_check "$1" "kmod_limits $1 cannot run here (its skip line above)" ;;
	*) fail "$1" "kmod_limits $1 failed (its lines above)" ;;
	esac
}
for mode in stall stall_batch; do
	relink
	run $mode
done
relink
# stats/ holds only what the module counted; the per-user bounds.
run counters
run users
echo "== no shim"
check "memlock.no_shim" "$BIN" memlock
echo "== shim, UNLOAD_MODE=unload"
W=$(mktemp -d /tmp/memlock.XXXXXX)
chmod 0777 "$W"
check "memlock.shim" env LD_PRELOAD="$SHIM" UNLOAD_MODE=unload UNLOAD_STATS_FILE="$W/stats" "$BIN" memlock
d=$(awk '$1 == "writes_direct" || $1 == "writes_mapped" { s += $2 } END { print s + 0 }' "$W/stats" 2>/dev/null)
expect memlock.went_direct "$([ "${d:-0}" -ge 1 ] && echo 1)" "writes_direct + writes_mapped $d"
if [ -n "$SAFETY" ]; then
	for g in charge_once arena_cycles err_mid_batch unreg_other destroy_drain mw mr_churn; do
		echo "== $g"
		relink
		"$SAFETY" $g
		case $? in
		0) ok "$g" ;;
		77) skip_check "$g" "kmod_safety $g cannot run here (its skip line above)" ;;
		*) fail "$g" "kmod_safety $g failed (its lines above)" ;;
		esac
	done
fi
if [ -n "$MAPPED" ]; then
	# race at 300 rounds: 10000 (its default) took 92 s of this boot beside another
	# guest; a revocation that misses its zap fails nearly every round (1696 of 2000).
	for g in grant revoke ptrace "race 300"; do
		echo "== mapped $g"
		relink
		"$MAPPED" $g
		case $? in
		0) ok "mapped_${g% *}" ;;
		77) skip_check "mapped_${g% *}" "kmod_mapped $g cannot run here (its skip line above)" ;;
		*) fail "mapped_${g% *}" "kmod_mapped $g failed (its lines above)" ;;
		esac
	done
	relink
fi
finish
