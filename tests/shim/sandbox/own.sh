#!/bin/bash
# Our verbs program under the shim per mode: integrity (4 QPs, one exact CQ, 10^5 random writes), data-then-flag order, error equivalence, dlopen, completion channels, threads, fork, ibv_cq_ex polling, the wr_* API; adaptive integrity.
. "$(dirname "$0")/lib.sh"
[ -e "$SHIM" ] || { echo "SKIP: no $SHIM"; exit 77; }
BIN=$BUILD/tests/shim
WRITES=${INTEGRITY_WRITES:-100000}
total_writes() { echo $(($(stat "$1" writes_offload) + $(stat "$1" writes_inline) + $(stat "$1" writes_stage) + $(stat "$1" writes_direct))); }

# under MODE NAME CMD...: runs CMD under the shim in MODE, stats in $WORK/NAME.stats.
under() {
	local mode=$1 name=$2; shift 2
	rm -f "$WORK/$name.stats"
	env LD_PRELOAD="$SHIM" UNLOAD_MODE="$mode" UNLOAD_STATS_FILE="$WORK/$name.stats" \
		timeout 600 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
	local rc=$?
	cat "$WORK/$name.out"
	[ $rc -eq 0 ] || { echo "--- $name rc=$rc"; tail -5 "$WORK/$name.err"; }
	return $rc
}

timeout 300 "$BIN/verbs_check" errors >"$WORK/errors.ref" 2>&1
check "errors without the shim ran" [ -s "$WORK/errors.ref" ]
sed 's/^/    ref /' "$WORK/errors.ref"
timeout 600 "$BIN/verbs_check" integrity "$WRITES" 7 >"$WORK/int.ref" 2>&1
check "integrity without the shim" grep -q 'checksum_mismatches 0' "$WORK/int.ref"

for mode in offload unload threshold; do
	check "integrity $mode: $WRITES writes, completions exact, checksums equal" \
		under $mode int_$mode "$BIN/verbs_check" integrity "$WRITES" 7
	show_stats int_$mode
	check "integrity $mode: same completion counts as without the shim" diff "$WORK/int.ref" "$WORK/int_$mode.out"
	if [ $mode != offload ]; then
		check "integrity $mode: both paths used" [ "$(stat "$WORK/int_$mode.stats" writes_inline)" -gt 0 \
			-a "$(stat "$WORK/int_$mode.stats" writes_offload)" -gt 0 ]
	fi
	check "order $mode: data-then-flag, 0 violations" under $mode ord_$mode "$BIN/verbs_check" order 20000 3
	show_stats ord_$mode
	under $mode err_$mode "$BIN/verbs_check" errors >/dev/null
	check "errors $mode: same statuses and QP states as without the shim" \
		diff "$WORK/errors.ref" "$WORK/err_$mode.out"
	check "event $mode: ibv_get_cq_event wakes for every completion" under $mode ev_$mode "$BIN/verbs_check" event 600
	check "event $mode: poll(2) on the channel fd wakes for every completion" under $mode evfd_$mode "$BIN/verbs_check" event 600 fd
	check "threads $mode: 4 threads, a QP and CQ each" under $mode thr_$mode "$BIN/verbs_check" threads 4 5000
	check "threads $mode: 4 threads, one shared CQ" under $mode thrs_$mode "$BIN/verbs_check" threads 4 5000 shared
	show_stats thrs_$mode
	check "fork $mode: the child exits, the parent keeps writing" under $mode fork_$mode "$BIN/verbs_check" fork 200
	check "fork $mode: the child's statistics repeat none of the parent's" [ "$(total_writes "$WORK/fork_$mode.stats")" -eq 600 ]
	check "cqex $mode: an ibv_cq_ex send CQ, completions exact, checksums equal" under $mode cqex_$mode "$BIN/verbs_check" cqex 2000
	show_stats cqex_$mode
	check "wrapi $mode: wr_* batches (some aborted), completions exact, checksums equal" under $mode wr_$mode "$BIN/verbs_check" wrapi 3000 5
	show_stats wr_$mode
	if [ $mode != offload ]; then
		check "wrapi $mode: the shim inlined wr_* writes" [ "$(stat "$WORK/wr_$mode.stats" writes_inline)" -gt 0 ]
	fi
	check "dlopen program $mode: works" under $mode dl_$mode "$BIN/verbs_dlopen" basic 200
	show_stats dl_$mode
	if [ $mode = offload ]; then
		check "dlopen program $mode: writes intercepted (offload)" [ "$(stat "$WORK/dl_$mode.stats" writes_offload)" -eq 200 ]
	else
		check "dlopen program $mode: writes intercepted (inline)" [ "$(stat "$WORK/dl_$mode.stats" writes_inline)" -eq 200 ]
	fi
done
check "integrity adaptive: completions exact, checksums equal" under adaptive int_adaptive "$BIN/verbs_check" integrity 20000 7
show_stats int_adaptive
check "order adaptive: 0 violations" under adaptive ord_adaptive "$BIN/verbs_check" order 5000 3
check "no-module notice printed once" [ "$(grep -c 'kernel module not available' "$WORK/dl_unload.err")" -eq 1 ]
UNLOAD_INLINE_MAX=abc under unload badenv "$BIN/verbs_check" basic 10 >/dev/null
check "bad UNLOAD_INLINE_MAX: one error line naming it" [ "$(grep -c 'UNLOAD_INLINE_MAX' "$WORK/badenv.err")" -eq 1 ]
check "bad UNLOAD_INLINE_MAX: default kept (inline used)" [ "$(stat "$WORK/badenv.stats" writes_inline)" -eq 10 ]
finish
