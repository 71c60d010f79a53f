#!/bin/bash
# Guest half of wire_peers: host A under the shim in every mode against host B with no shim and no module, A as initiator and as target.
. "$(dirname "$0")/lib.sh"
[ -x "$WL" ] || skip "no wire_workload at $WL"
[ -e "$SHIM" ] || skip "no shim at $SHIM"
if [ "$ME" = B ] && { [ -e /dev/unload ] || grep -q '^unload ' /proc/modules; }; then
	fail "host B without unload" "our module is loaded on B"
	finish
fi

D=(-d "$DEV")
lat=(ib_write_lat "${D[@]}" -x "$GIDX" -n 200 -s 64)
bw=(ib_write_bw "${D[@]}" -x "$GIDX" -n 200 -s 1024)
pp=(ibv_rc_pingpong "${D[@]}" -g "$GIDX" -n 100)
# Servers listen on their own address, clients dial the other host's.
HA=$UNLOAD_HOST_ADDR

total() { echo $(($(stat "$1" writes_offload) + $(stat "$1" writes_inline) + $(stat "$1" writes_stage) + $(placed_here "$1"))); }
# paths NAME MODE: the writes A's side made took the paths MODE allows.
paths() {
	local f=$WORK/$1.stats
	[ "$ME" = A ] || return 0
	show_stats "$1"
	case $2 in
	offload) check "$1: every write on the NIC" [ "$(stat "$f" writes_offload)" -gt 0 -a "$(stat "$f" writes_offload)" -eq "$(total "$f")" ] ;;
	inline | stage) check "$1: writes took unload.$2" [ "$(stat "$f" "writes_$2")" -gt 0 ] ;;
	direct | mapped) check "$1: $2 is for local peers: the NIC took them" [ "$(placed_here "$f")" -eq 0 -a "$(stat "$f" writes_offload)" -gt 0 ] ;;
	adaptive) check "$1: every write counted" [ "$(total "$f")" -gt 0 ] ;;
	esac
}

for mode in offload inline stage direct adaptive; do
	env=UNLOAD_PATH=$mode
	[ $mode = offload ] || [ $mode = adaptive ] && env=UNLOAD_MODE=$mode
	check "$mode: wire_workload, shim A -> plain B (target bytes, exact completions)" \
		step wlout_$mode B "$env" -- "$WL" server -- "$WL" client "$PEER_ADDR"
	paths wlout_$mode $mode
	check "$mode: wire_workload, plain B -> shim A" \
		step wlin_$mode A "$env" -- "$WL" server -- "$WL" client "$PEER_ADDR"
	check "$mode: ib_write_lat, plain server B, shim client A" \
		step lat_$mode B "$env" -- "${lat[@]}" -- "${lat[@]}" "$PEER_ADDR"
	paths lat_$mode $mode
	check "$mode: ib_write_bw, plain server B, shim client A" \
		step bw_$mode B "$env" -- "${bw[@]}" -- "${bw[@]}" "$PEER_ADDR"
	check "$mode: ibv_rc_pingpong, shim server A, plain client B" \
		step pp_$mode A "$env" -- "${pp[@]}" -- "${pp[@]}" "$PEER_ADDR"
	check "$mode: rping (the server writes), shim server A, plain client B" \
		step rping_$mode A "$env" -- rping -s -a "$HA" -C 20 -S 64 -V -- rping -c -a "$PEER_ADDR" -C 20 -S 64 -V
	paths rping_$mode $mode
done
if [ "$ME" = A ]; then
	# The workload's own checks (target bytes at B, completions at A, and the reverse).
	for r in "$WORK"/wl*_*.srv "$WORK"/wl*_*.cli; do
		grep -h '^FAIL' "$r" | sed "s|^|    $(basename "$r"): |"
	done
fi
finish
