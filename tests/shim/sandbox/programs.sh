#!/bin/bash
# Unmodified ib_write_bw (both post-send flows), ib_send_lat, ibv_rc_pingpong and rping under the shim in each mode (adaptive too); stats show the path.
. "$(dirname "$0")/lib.sh"
need_shim

N=500
# expect NAME MODE: the writes of a small-message run took the path MODE implies.
expect_small() {
	local f=$WORK/$1.stats want=$2
	show_stats "$1"
	case $2 in
	offload) check "$1: all $3 writes offloaded" [ "$(stat "$f" writes_offload)" -ge "$3" ] ;;
	*) check "$1: all $3 writes took unload.inline" [ "$(stat "$f" writes_inline)" -ge "$3" ] ;;
	esac
	check "$1: no write on another path" [ "$(total_writes "$f")" -eq "$(stat "$f" writes_$want)" ]
}

for mode in offload unload threshold; do
	want=offload; [ $mode = offload ] || want=inline
	check "ib_write_bw $mode 64B" run_pair bw_$mode $mode \
		ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 -- ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 "$ADDR"
	expect_small bw_$mode $want $N
	check "ib_write_bw --use_old_post_send $mode 64B" run_pair bwold_$mode $mode \
		ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 --use_old_post_send -- \
		ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 --use_old_post_send "$ADDR"
	expect_small bwold_$mode $want $N
	check "ib_write_bw $mode 64KiB (above inline: offload)" run_pair bwbig_$mode $mode \
		ib_write_bw -d "$DEV" -x "$GIDX" -n 100 -s 65536 -- ib_write_bw -d "$DEV" -x "$GIDX" -n 100 -s 65536 "$ADDR"
	show_stats bwbig_$mode
	check "bwbig_$mode: offloaded" [ "$(stat "$WORK/bwbig_$mode.stats" writes_offload)" -ge 100 ]
	check "ib_send_lat $mode" run_pair slat_$mode $mode \
		ib_send_lat -d "$DEV" -x "$GIDX" -n $N -s 64 -- ib_send_lat -d "$DEV" -x "$GIDX" -n $N -s 64 "$ADDR"
	check "ib_send_lat $mode: sends are not writes" [ "$(total_writes "$WORK/slat_$mode.stats")" -eq 0 ]
	check "ibv_rc_pingpong $mode" run_pair pp_$mode $mode \
		ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -c -- ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -c "$ADDR"
	check "ibv_rc_pingpong -N (wr_* API) -e (events) $mode" run_pair ppn_$mode $mode \
		ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -N -e -- ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -N -e "$ADDR"
	check "rping $mode" run_pair rping_$mode $mode \
		rping -s -a "$ADDR" -C 20 -S 64 -V -- rping -c -a "$ADDR" -C 20 -S 64 -V
	expect_small rping_$mode $want 20
done
# adaptive: the same programs run exactly (which path each write takes is the policy's).
check "ib_write_bw adaptive 64B" run_pair bw_adaptive adaptive \
	ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 -- ib_write_bw -d "$DEV" -x "$GIDX" -n $N -s 64 "$ADDR"
show_stats bw_adaptive
check "ibv_rc_pingpong -N (wr_* API) -e (events) adaptive" run_pair ppn_adaptive adaptive \
	ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -N -e -- ibv_rc_pingpong -d "$DEV" -g "$GIDX" -n 200 -N -e "$ADDR"
check "rping adaptive" run_pair rping_adaptive adaptive \
	rping -s -a "$ADDR" -C 20 -S 64 -V -- rping -c -a "$ADDR" -C 20 -S 64 -V
show_stats rping_adaptive
finish
