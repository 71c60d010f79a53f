#!/bin/bash
# Guest half of wire_proof: the workload from A to B without the shim, under it with offload, inline and stage forced, then adaptive with sysfs mode flips.
. "$(dirname "$0")/lib.sh"
[ -x "$WL" ] || skip "no wire_workload at $WL"
[ -e "$SHIM" ] || skip "no shim at $SHIM"

# The runs, in capture order (connections 0 to 4); run_proof.sh compares their streams.
wl() { step "$1" B "$2" -- "$WL" server -- "$WL" client "$PEER_ADDR"; }
check "noshim: wire_workload A -> B, no preload" wl noshim noshim
for path in offload inline stage; do
	check "$path: wire_workload A -> B, UNLOAD_PATH=$path" wl "$path" "UNLOAD_PATH=$path"
done

# Adaptive: the client itself writes the next mode into sysfs after every post, so the
# mode changes at known points mid-run (offload, unload, threshold, adaptive, ...).
[ "$ME" = B ] || echo adaptive >/sys/kernel/unload/mode
check "adaptive: wire_workload A -> B, mode flipped through sysfs after every post" \
	step adaptive B - -- "$WL" server -- "$WL" client --flip /sys/kernel/unload/mode "$PEER_ADDR"
if [ "$ME" = A ]; then
	echo adaptive >/sys/kernel/unload/mode
	grep -h "mode changes" "$WORK/adaptive.cli" | sed 's/^/    /'
	f=$WORK/adaptive.stats
	check "adaptive: writes took the NIC and a CPU path as the mode changed" \
		[ "$(stat "$f" writes_offload)" -gt 0 -a $(($(stat "$f" writes_inline) + $(stat "$f" writes_stage))) -gt 0 ]
	# Forcing a path proves nothing unless the path was taken.
	for r in offload inline stage adaptive; do show_stats $r; done
	check "offload: every write on the NIC" [ "$(stat "$WORK/offload.stats" writes_inline)$(stat "$WORK/offload.stats" writes_stage)" = 00 ]
	check "inline: small writes took unload.inline" [ "$(stat "$WORK/inline.stats" writes_inline)" -gt 0 ]
	check "stage: writes took unload.stage" [ "$(stat "$WORK/stage.stats" writes_stage)" -gt 0 ]
	# Each side's checks, as the workload printed them.
	for r in noshim offload inline stage adaptive; do
		grep -h '^\(ok\|FAIL\):' "$WORK/$r.srv" "$WORK/$r.cli" | sed "s/^/    $r: /"
	done
fi
finish
