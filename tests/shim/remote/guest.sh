#!/bin/bash
# Guest half of shim_remote: host A under the shim with UNLOAD_PATH=remote against host B, module on both: perftest's writes go remote, and the same requests give the same outcome on the NIC and on the remote path, and without a channel key.
. "$(dirname "$0")/lib.sh"

# mark NAME: host B's stats/remote_placed_writes after step NAME (B publishes, A reads).
mark() {
	if [ "$ME" = B ]; then
		put "$P/$1.placed" "$(cat "$S/stats/remote_placed_writes")"
		echo 0
		return
	fi
	wait_file "$P/$1.placed" 300 >/dev/null && cat "$P/$1.placed"
}
# rep NAME: this host's reported/NAME (the sessions' claims, folded at their close).
rep() { cat "$S/reported/$1"; }
all_writes() {
	echo $(($(stat "$1" writes_offload) + $(stat "$1" writes_inline) + $(stat "$1" writes_stage) + \
		$(stat "$1" writes_direct) + $(stat "$1" writes_mapped) + $(stat "$1" writes_remote)))
}

# perf NAME: A's writes of step NAME went remote (most of them), B's module placed each
# of them, and A's reported/writes_remote counted them. $1 step, $2 B's count before, $3
# after, $4 A's reported/writes_remote before.
perf() {
	[ "$ME" = A ] || return 0
	local f=$WORK/$1.stats w t rep_now
	w=$(stat "$f" writes_remote)
	t=$(all_writes "$f")
	rep_now=$(rep writes_remote)
	show_stats "$1"
	check "$1: most of A's writes went remote ($w of $t)" [ "$w" -gt 0 -a $((w * 10)) -ge $((t * 9)) ]
	# A step perftest's clock made run again (STEP_RUNS > 1) placed the earlier runs' writes
	# too, where A's statistics file holds the last run's: then at least as many.
	check "$1: B's module placed them (stats/remote_placed_writes +$(($3 - $2)), A's writes_remote $w, $STEP_RUNS run(s))" \
		runs_count "$(($3 - $2))" "$w"
	check "$1: A's reported/writes_remote counted them (+$((rep_now - $4)))" runs_count $((rep_now - $4)) "$w"
}
# runs_count TOTAL LAST: TOTAL, counted over the step's runs, is LAST when it ran once, and
# at least LAST when it ran again.
runs_count() { [ "$1" -eq "$2" ] || { [ "$STEP_RUNS" -gt 1 ] && [ "$1" -ge "$2" ]; }; }

env=UNLOAD_PATH=remote
lat=(ib_write_lat -d "$DEV" -x "$GIDX" -n 300 -s 64)
bw=(ib_write_bw -d "$DEV" -x "$GIDX" -n 300 -s 4096)
bwl=(ib_write_bw -d "$DEV" -x "$GIDX" -n 304 -s 1024 -l 8)

# First, before any step opens a channel: a program in unload mode (no path forced) whose
# channel comes up while it runs. Half its writes go before (no channel: not remote), then
# A opens the channel (`unloadctl probe`), and the other half must go remote: its QP asks
# again once the module's count of channels come up moved.
pl0=$(mark late0)
if [ "$ME" = A ]; then
	(wait_file "$P/late.done.mid" 200 >/dev/null &&
		"$BUILD/tools/unloadctl/unloadctl" probe -d "$DEV" "$PEER_ADDR" >"$WORK/late.probe" 2>&1
		put "$P/late.done.go" go) &
fi
STEP_ENV_B=UNLOAD_PATH=offload check "a channel come up mid-run: unload mode, shim client A, server B" \
	step late B UNLOAD_MODE=unload -- "$RP" stream-server late "$P/late.done" -- \
	"$RP" late-client "$PEER_ADDR" late "$P/late.done"
pl1=$(mark late)
if [ "$ME" = A ]; then
	wait
	show_stats late
	check "late channel: every write succeeded" grep -q '50 of 50 before the channel, 50 of 50 after' "$WORK/late.cli"
	w=$(stat "$WORK/late.stats" writes_remote)
	check "late channel: the half after it went remote ($w of 50), B's module placed them (+$((pl1 - pl0)))" \
		[ "$w" -eq 50 -a $((pl1 - pl0)) -eq 50 ]
fi

p0=$(mark start)
r0=$(rep writes_remote)
# B runs under the shim too, its writes on the NIC: a remote target must be registered
# with its module (docs/design.md, "A remote write's walk").
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_lat 64 B, shim client A (remote), server B" \
	step lat B "$env" -- "${lat[@]}" -- "${lat[@]}" "$PEER_ADDR"
p1=$(mark lat)
[ "$ME" = A ] && check "ib_write_lat: its usual result line (64 B, 300 iterations)" grep -Eq '^ +64 +300 ' "$WORK/lat.cli"
perf lat "$p0" "$p1" "$r0"

r1=$(rep writes_remote)
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_bw 4 KiB, shim client A (remote), server B" \
	step bw B "$env" -- "${bw[@]}" -- "${bw[@]}" "$PEER_ADDR"
p2=$(mark bw)
[ "$ME" = A ] && check "ib_write_bw: its usual result line (4096 B, 300 iterations)" grep -Eq '^ +4096 +300 ' "$WORK/bw.cli"
perf bw "$p1" "$p2" "$r1"

r2=$(rep writes_remote)
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_bw -l 8, shim client A (remote), server B" \
	step bwl B "$env" -- "${bwl[@]}" -- "${bwl[@]}" "$PEER_ADDR"
p3=$(mark bwl)
[ "$ME" = A ] && check "ib_write_bw -l 8: its usual result line (1024 B, 304 iterations)" grep -Eq '^ +1024 +304 ' "$WORK/bwl.cli"
perf bwl "$p2" "$p3" "$r2"

# 1024 QPs between the hosts, each registered and probing once: they all share the one
# channel the steps before opened (one per device, port and peer host).
r3=$(rep writes_remote)
qps=(ib_write_bw -d "$DEV" -x "$GIDX" -q 1024 -n 5 -s 256)
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_bw -q 1024, shim client A (remote), server B" \
	step qps B "$env" -- "${qps[@]}" -- "${qps[@]}" "$PEER_ADDR"
p3q=$(mark qps)
perf qps "$p3" "$p3q" "$r3"
chan() { cat "$S/channel/$1"; }
check "1024 QPs: one channel on host $ME, opened once in the run (open $(chan open), opened $(chan opened))" \
	[ "$(chan open)" -eq 1 -a "$(chan opened)" -eq 1 ]

# Unforced, the modes that rank remote take it for a peer on another host once a channel
# to it is up (the steps before opened it): unload mode ranks it first there. The default
# mode (adaptive) keeps a hot target page (perftest writes one buffer) on the NIC's side:
# its share is printed, not checked (timings decide adaptive's warm-up).
r4=$(rep writes_remote)
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_bw 4 KiB in unload mode (no path forced), shim client A, server B" \
	step bw_unload B UNLOAD_MODE=unload -- "${bw[@]}" -- "${bw[@]}" "$PEER_ADDR"
p4u=$(mark bw_unload)
perf bw_unload "$p3q" "$p4u" "$r4"
STEP_ENV_B=UNLOAD_PATH=offload check "ib_write_bw 4 KiB in the default mode, shim client A, server B" \
	step bw_default B - -- "${bw[@]}" -- "${bw[@]}" "$PEER_ADDR"
p4d=$(mark bw_default)
if [ "$ME" = A ]; then
	show_stats bw_default
	echo "measured: default mode, one hot target page: $(stat "$WORK/bw_default.stats" writes_remote) of" \
		"$(all_writes "$WORK/bw_default.stats") writes remote (B placed $((p4d - p4u)))"
fi

# The same requests twice: neither host under the shim (the NIC's outcome), then both
# (A's writes remote, B's QP and region registered with its module).
check "remote_parity without the shim (the NIC's reference)" \
	step par_nic B noshim -- "$RP" server -- "$RP" client "$PEER_ADDR"
p4=$(mark par_nic)
STEP_ENV_B=UNLOAD_PATH=remote check "remote_parity under the shim on both hosts, UNLOAD_PATH=remote" \
	step par_remote B "$env" -- "$RP" server -- "$RP" client "$PEER_ADDR"
p5=$(mark par_remote)
# Unforced too: A in unload mode ranks remote over the channel the steps before opened.
STEP_ENV_B=UNLOAD_PATH=offload check "remote_parity, A in unload mode (no path forced), B under the shim" \
	step par_unload B UNLOAD_MODE=unload -- "$RP" server -- "$RP" client "$PEER_ADDR"
if [ "$ME" = A ]; then
	for side in cli srv; do
		grep '^R ' "$WORK/par_nic.$side" >"$WORK/nic.$side"
		grep '^R ' "$WORK/par_remote.$side" >"$WORK/remote.$side"
		grep '^R ' "$WORK/par_unload.$side" >"$WORK/unload.$side"
	done
	who() { [ "$1" = cli ] && echo "client A: completions, statuses, wr_ids, QP states" ||
		echo "server B: target bytes and QP states"; }
	for side in cli srv; do
		check "parity, unload mode, $(who $side): identical on the NIC and unforced" \
			diff -u "$WORK/nic.$side" "$WORK/unload.$side"
	done
	show_stats par_unload
	check "parity, unload mode: A's writes went remote unforced ($(stat "$WORK/par_unload.stats" writes_remote))" \
		[ "$(stat "$WORK/par_unload.stats" writes_remote)" -gt 0 ]
	for side in cli srv; do
		check "parity, $(who $side): $(wc -l <"$WORK/nic.$side") lines, identical on the NIC and remote" \
			diff -u "$WORK/nic.$side" "$WORK/remote.$side"
	done
	check "parity: the reference has the denied write, and the write after it flushed" \
		grep -Pzq 'wr_id 501 remote access error\n.*\n.*wr_id 502 Work Request Flushed Error' "$WORK/nic.cli"
	w=$(stat "$WORK/par_remote.stats" writes_remote)
	show_stats par_remote
	check "parity: A's writes went remote ($w), B's module placed them (+$((p5 - p4)))" \
		[ "$w" -gt 0 -a $((p5 - p4)) -eq "$w" ]
	# The denied writes (a bad rkey; a responder QP without REMOTE_WRITE; a bad rkey among
	# writes in flight) were sent remote, refused there, and posted to the NIC; the writes
	# after each (one, one, two) saw the failure, or were cancelled behind it, and went to
	# the NIC to be flushed.
	check "parity: the denied writes went remote, were refused and took the NIC (why_not_refused 3)" \
		[ "$(stat "$WORK/par_remote.stats" why_not_refused)" -eq 3 ]
	check "parity: the writes after each saw the failure (why_not_qp_error 4)" \
		[ "$(stat "$WORK/par_remote.stats" why_not_qp_error)" -eq 4 ]
	check "parity: the reference's reads returned the bytes from before the writes after them" \
		[ "$(grep -Ec 'read wr_id .* ([0-9]+) of \1 bytes from before the write' "$WORK/nic.cli")" -eq 2 ]
	# The switch: both immediates on the NIC, the plain write between them remote, after a fence.
	check "parity: the switch's immediates took the NIC (why_not_with_imm 2), the remote write a fence" \
		[ "$(stat "$WORK/par_remote.stats" why_not_with_imm)" -eq 2 -a "$(stat "$WORK/par_remote.stats" fences)" -ge 1 ]
	sed 's/^/    /' "$WORK/remote.cli" "$WORK/remote.srv"
fi

# The same requests built with the wr_* API, each list one wr_start .. wr_complete batch:
# a batch's first write may go remote (the rest take the NIC behind it, in their place).
check "remote_parity, wr_* API, without the shim (the NIC's reference)" \
	step parwr_nic B noshim -- "$RP" server -- "$RP" client "$PEER_ADDR" wr
p5w=$(mark parwr_nic)
STEP_ENV_B=UNLOAD_PATH=remote check "remote_parity, wr_* API, under the shim on both hosts, UNLOAD_PATH=remote" \
	step parwr_remote B "$env" -- "$RP" server -- "$RP" client "$PEER_ADDR" wr
p6w=$(mark parwr_remote)
STEP_ENV_B=UNLOAD_PATH=offload check "remote_parity, wr_* API, A in unload mode (no path forced), B under the shim" \
	step parwr_unload B UNLOAD_MODE=unload -- "$RP" server -- "$RP" client "$PEER_ADDR" wr
if [ "$ME" = A ]; then
	for side in cli srv; do
		grep '^R ' "$WORK/parwr_nic.$side" >"$WORK/wr_nic.$side"
		grep '^R ' "$WORK/parwr_remote.$side" >"$WORK/wr_remote.$side"
		grep '^R ' "$WORK/parwr_unload.$side" >"$WORK/wr_unload.$side"
		check "parity, wr_* API, $(who $side): identical on the NIC and remote" \
			diff -u "$WORK/wr_nic.$side" "$WORK/wr_remote.$side"
		check "parity, wr_* API, unload mode, $(who $side): identical on the NIC and unforced" \
			diff -u "$WORK/wr_nic.$side" "$WORK/wr_unload.$side"
	done
	check "parity, wr_* API, unload mode: A's writes went remote unforced ($(stat "$WORK/parwr_unload.stats" writes_remote))" \
		[ "$(stat "$WORK/parwr_unload.stats" writes_remote)" -gt 0 ]
	w=$(stat "$WORK/parwr_remote.stats" writes_remote)
	show_stats parwr_remote
	check "parity, wr_* API: A's writes went remote ($w), B's module placed them (+$((p6w - p5w)))" \
		[ "$w" -gt 0 -a $((p6w - p5w)) -eq "$w" ]
	# The list of 8's first write, held for remote, goes to the NIC when the second comes:
	# the reason is the batch's (queue), not a lack of room.
	check "parity, wr_* API: a held write given back to its batch counts as queue, not no_room ($(stat "$WORK/parwr_remote.stats" why_not_no_room))" \
		[ "$(stat "$WORK/parwr_remote.stats" why_not_no_room)" -eq 0 ]
fi

# Threads on one channel: four client threads, each its own QP and CQ, post at once; the
# NIC's run and the remote run must print the same completions and target bytes.
check "remote_parity threads without the shim (the NIC's reference)" \
	step thr_nic B noshim -- "$RP" threads-server -- "$RP" threads-client "$PEER_ADDR"
p6=$(mark thr_nic)
STEP_ENV_B=UNLOAD_PATH=offload check "remote_parity threads, A under the shim (UNLOAD_PATH=remote), B too" \
	step thr_remote B "$env" -- "$RP" threads-server -- "$RP" threads-client "$PEER_ADDR"
p7=$(mark thr_remote)
if [ "$ME" = A ]; then
	# A line per thread, in the order the threads ended: compared sorted.
	for side in cli srv; do
		grep '^R ' "$WORK/thr_nic.$side" | sort >"$WORK/thr_nic.R.$side"
		grep '^R ' "$WORK/thr_remote.$side" | sort >"$WORK/thr_remote.R.$side"
	done
	check "threads: the reference completed every write, in order (4 x 120)" \
		[ "$(grep -c ': 120 of 120 completions, 120 in post order, 120 succeeded' "$WORK/thr_nic.R.cli")" -eq 4 ]
	for side in cli srv; do
		check "threads, $([ $side = cli ] && echo "client A's completions" || echo "server B's slices"): identical on the NIC and remote" \
			diff -u "$WORK/thr_nic.R.$side" "$WORK/thr_remote.R.$side"
	done
	w=$(stat "$WORK/thr_remote.stats" writes_remote)
	check "threads: every write went remote ($w of 480), B's module placed them (+$((p7 - p6)))" \
		[ "$w" -eq 480 -a $((p7 - p6)) -eq 480 ]
fi

# No key on A: its listener and channels closed. Forced remote, every write takes the NIC
# with a counted reason, and the program's outcome is the NIC's.
[ "$ME" = A ] && echo none >"$S/channel/key"
STEP_ENV_B=UNLOAD_PATH=offload check "remote_parity, no channel key on A, UNLOAD_PATH=remote" \
	step par_nokey B "$env" -- "$RP" server -- "$RP" client "$PEER_ADDR"
if [ "$ME" = A ]; then
	check "no key: A's channel closed (listening $(chan listening), open $(chan open))" \
		[ "$(chan listening)" -eq 0 -a "$(chan open)" -eq 0 ]
	for side in cli srv; do
		grep '^R ' "$WORK/par_nokey.$side" >"$WORK/nokey.$side"
		check "no key, $(who $side): identical on the NIC and without a key" \
			diff -u "$WORK/nic.$side" "$WORK/nokey.$side"
	done
	show_stats par_nokey
	check "no key: no write went remote, and the reason was counted (why_not_no_key $(stat "$WORK/par_nokey.stats" why_not_no_key))" \
		[ "$(stat "$WORK/par_nokey.stats" writes_remote)" -eq 0 -a "$(stat "$WORK/par_nokey.stats" why_not_no_key)" -gt 0 ]
	cat "$UNLOAD_CHAN_KEY_FILE" >"$S/channel/key"
fi

finish
