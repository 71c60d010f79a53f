#!/bin/bash
# Guest half of wire_proof: the workload from A to B without the shim, under it with offload, inline and stage forced, then adaptive with sysfs mode flips.
. "$(dirname "$0")/lib.sh"
[ -x "$WL" ] || { echo "SKIP: no $WL"; exit 77; }
[ -e "$SHIM" ] || { echo "SKIP: no $SHIM"; exit 77; }

# The runs, in capture order (connections 0 to 4); run_proof.sh compares their streams.
wl() { step "$1" B "$2" -- "$WL" server -- "$WL" client "$PEER_ADDR"; }
check "noshim: wire_workload A -> B, no preload" wl noshim noshim
for path in offload inline stage; do
	check "$path: wire_workload A -> B, UNLOAD_PATH=$path" wl "$path" "UNLOAD_PATH=$path"
done

# Adaptive, the module's mode flipped through sysfs while the workload runs.
flips=0
if [ "$ME" = A ]; then
	echo adaptive >/sys/kernel/unload/mode
	(
		while [ ! -e "$WORK/stop" ]; do
			for m in offload unload threshold adaptive; do
				echo $m >/sys/kernel/unload/mode && echo flip >>"$WORK/flips"
				sleep 0.2
			done
		done
	) &
	flipper=$!
fi
check "adaptive: wire_workload A -> B, mode flipped through sysfs" wl adaptive -
if [ "$ME" = A ]; then
	: >"$WORK/stop"
	wait $flipper
	flips=$(wc -l <"$WORK/flips")
	echo adaptive >/sys/kernel/unload/mode
	check "adaptive: the mode flipped during the run ($flips writes to /sys/kernel/unload/mode)" [ "$flips" -ge 4 ]

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
