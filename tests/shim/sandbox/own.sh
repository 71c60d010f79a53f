#!/bin/bash
# The semantics programs under the shim in each mode without the module (offload, unload, threshold, adaptive: paths mixed per write, which semantics.sh's forced paths are not): outcomes equal to the run without the shim; the statistics show which paths took the writes, a dlopen'ed libibverbs intercepted, a forked child's counts not repeated, bad tunables reported.
. "$(dirname "$0")/lib.sh"
need_shim
W=${INTEGRITY_WRITES:-8000}

for mode in offload unload threshold; do
	want=offload; [ $mode = offload ] || want=inline
	same_outcome $mode int_$mode integrity "$W" 7
	show_stats int_$mode
	if [ $mode != offload ]; then
		check "integrity $mode: both paths used (inline and the NIC)" [ "$(stat "$WORK/int_$mode.stats" writes_inline)" -gt 0 \
			-a "$(stat "$WORK/int_$mode.stats" writes_offload)" -gt 0 ]
	fi
	same_outcome $mode ord_$mode order 2500 3
	show_stats ord_$mode
	# No concurrent children (0): the count is then the parent's 4 runs of 200 alone.
	same_outcome $mode fork_$mode fork 200 0
	check "fork $mode: the child's statistics repeat none of the parent's" [ "$(total_writes "$WORK/fork_$mode.stats")" -eq 800 ]
	same_outcome $mode wr_$mode wr_batches 3000 5
	show_stats wr_$mode
	if [ $mode != offload ]; then
		check "wr_batches $mode: the shim inlined wr_* writes" [ "$(stat "$WORK/wr_$mode.stats" writes_inline)" -gt 0 ]
	fi
	same_outcome $mode dl_$mode dlopen_write 200
	show_stats dl_$mode
	check "dlopen_write $mode: its 200 writes intercepted ($want)" [ "$(stat "$WORK/dl_$mode.stats" writes_$want)" -eq 200 ]
done
# threshold decides per write; the rest of the programs once under it.
same_outcome threshold err_threshold error_status
same_outcome threshold ev_threshold event block 300
same_outcome threshold evfd_threshold event fd 300
same_outcome threshold thr_threshold threads separate 4 2000
same_outcome threshold thrs_threshold threads shared 4 2000
show_stats thrs_threshold
same_outcome threshold cqex_threshold cqex_many 12 96
# adaptive: correctness only (which path wins is the benchmarks' business).
same_outcome adaptive int_adaptive integrity 8000 7
show_stats int_adaptive
same_outcome adaptive ord_adaptive order 2500 3

# A process whose environment keeps every write on the NIC polls and arms its CQs with the
# provider's own entry points (nothing of the shim's can reach them) and posts through the
# shim, which counts; any other mode keeps the shim's poll.
ops_of() {
	local name=$1
	shift
	env "$@" LD_PRELOAD="$SHIM" timeout 60 "$BIN/shim_ops_owner" >"$WORK/ops_$name.out" 2>"$WORK/ops_$name.err"
}
# The library an op of run NAME named: "shim", or "provider" (a library, not the shim's).
ops_owner() {
	local lib
	lib=$(awk -v op="$2" '$1 == op { print $2 }' "$WORK/ops_$1.out")
	case $lib in
	libunload_shim.so) echo shim ;;
	"" | none) echo none ;;
	*) echo provider ;;
	esac
}
ops_are() { # NAME POST POLL NOTIFY
	[ "$(ops_owner "$1" post_send) $(ops_owner "$1" poll_cq) $(ops_owner "$1" req_notify_cq)" = "$2 $3 $4" ]
}
for pin in mode:UNLOAD_MODE=offload path:UNLOAD_PATH=offload disabled:UNLOAD_ENABLED=0; do
	ops_of "${pin%%:*}" "${pin#*:}"
	check "${pin#*:}: ibv_poll_cq and ibv_req_notify_cq are the provider's, ibv_post_send the shim's" \
		ops_are "${pin%%:*}" shim provider provider
done
ops_of unload UNLOAD_MODE=unload
ops_of inline UNLOAD_MODE=offload UNLOAD_PATH=inline
for m in unload inline; do
	check "ops under $m (not pinned to the NIC): post, poll and arming the shim's" ops_are $m shim shim shim
done

check "no-module notice printed once" [ "$(grep -c 'kernel module not available' "$WORK/dl_unload.err")" -eq 1 ]
UNLOAD_INLINE_MAX=abc under unload badenv "$BIN/sem_mt_post" 1 1 10
check "bad UNLOAD_INLINE_MAX: one error line naming it" [ "$(grep -c 'UNLOAD_INLINE_MAX' "$WORK/badenv.err")" -eq 1 ]
check "bad UNLOAD_INLINE_MAX: default kept (inline used)" [ "$(stat "$WORK/badenv.stats" writes_inline)" -eq 10 ]
finish
