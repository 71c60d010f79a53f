#!/usr/bin/env bash
# An event-driven program of ours (bench_write_lat's BM_Write_Event: a completion channel,
# ibv_get_cq_event, 16 signaled writes in flight, server and client on this host) in the
# default mode settles, by its statistics, on the path the bench shows fastest for its
# class; with one in flight too (issue 54; docs/perf/README.md, "Event-driven programs"): at 4 KiB the mapped path,
# at 64 KiB the module's direct copy (the mapped path's userspace copy of 64 KiB is 5-7x
# slower under TCG). No timing is asserted.
set -uo pipefail
. "$(dirname "$0")/../support/check.sh"
build=${UNLOAD_BUILD_DIR:?}
bench=$build/bench/verbs/bench_write_lat shim=$build/shim/libunload_shim.so
[ -e /dev/unload ] || skip "the module is not loaded"
dir=$(mktemp -d)

# stat FILE NAME: the client's count NAME (its block is the one with writes; the server
# ends with _exit and leaves none), 0 when absent.
stat() { awk -v k="$2" '$1 == k { v = $2 } END { print v + 0 }' "$1"; }
why() { awk '$1 ~ /^why_not_/ { s += $2 } END { print s + 0 }' "$1"; }

for bytes in 4096 65536; do
	f=$dir/stats.$bytes
	# Untouched by UNLOAD_MODE and UNLOAD_PATH: the default mode as users get it.
	if ! env -u UNLOAD_MODE -u UNLOAD_PATH -u UNLOAD_MAPPED LD_PRELOAD="$shim" UNLOAD_STATS_FILE="$f" \
		timeout 300 "$bench" --footprint_mib=1 --iters_scale=2 \
		--benchmark_filter="BM_Write_Event/bytes:$bytes/depth:16/" >"$dir/log.$bytes" 2>&1; then
		fail "$bytes B x16: the event-driven program runs" "$(tail -3 "$dir/log.$bytes")"
		continue
	fi
	all=0
	for p in offload inline stage direct mapped remote; do all=$((all + $(stat "$f" writes_$p))); done
	module=$(stat "$f" writes_direct) mapped=$(stat "$f" writes_mapped)
	here=$((module + mapped))
	expect "$bytes B x16: writes were counted" "$([ "$all" -gt 0 ] && echo 1)" "$all writes"
	# Adaptive decided every write that had a choice (all that went direct, none twice), and
	# learnt from some of them.
	decided=$(stat "$f" adaptive_decisions) samples=$(stat "$f" samples)
	expect "$bytes B x16: adaptive's decisions counted" \
		"$([ "$decided" -ge "$here" ] && [ "$decided" -le "$all" ] && echo 1)" \
		"$decided decisions for $all writes"
	expect "$bytes B x16: it learnt from a sample of them" \
		"$([ "$samples" -gt 0 ] && [ "$samples" -lt "$all" ] && echo 1)" "$samples samples of $all writes"
	# Adaptive's warm-up gives every eligible path 8 samples, and its exploration one write
	# in 32 or fewer: 4 in 5 placed here is a class that settled there.
	expect "$bytes B x16: the class settled on a path here (4 in 5 or more)" \
		"$([ $((here * 5)) -ge $((all * 4)) ] && echo 1)" "$here of $all"
	if [ "$bytes" = 4096 ]; then
		expect "4 KiB x16: the mapped path (9 in 10 or more of those)" \
			"$([ $((mapped * 10)) -ge $((here * 9)) ] && echo 1)" "$mapped mapped of $here"
	else
		expect "64 KiB x16: the module's direct copy (9 in 10 or more of those)" \
			"$([ $((module * 10)) -ge $((here * 9)) ] && echo 1)" "$module by the module of $here"
	fi
	# The mapped path's own reasons: a write the policy gave the module says why.
	expect "$bytes B x16: a reason for every write off the mapped path" \
		"$([ $((all - mapped)) -eq "$(why "$f")" ] && echo 1)" "$((all - mapped)) off it, $(why "$f") reasons"
done

# One write in flight at 4 KiB: the program arms its CQ with the last completion still
# queued, so the marker that wakes it goes at the arming, before the next write, and
# that write's copy is what it costs (its sample is learnt there, not at a marker:
# design.md, "Completion channels"). The bench shows the mapped path fastest.
f=$dir/stats.x1
if env -u UNLOAD_MODE -u UNLOAD_PATH -u UNLOAD_MAPPED LD_PRELOAD="$shim" UNLOAD_STATS_FILE="$f" \
	timeout 300 "$bench" --footprint_mib=1 --iters_scale=1 \
	--benchmark_filter="BM_Write_Event/bytes:4096/depth:1/" >"$dir/log.x1" 2>&1; then
	all=0
	for p in offload inline stage direct mapped remote; do all=$((all + $(stat "$f" writes_$p))); done
	mapped=$(stat "$f" writes_mapped)
	expect "4 KiB x1: the mapped path (4 in 5 or more)" \
		"$([ $((mapped * 5)) -ge $((all * 4)) ] && echo 1)" "$mapped mapped of $all"
else
	fail "4 KiB x1: the event-driven program runs" "$(tail -3 "$dir/log.x1")"
fi
rm -rf "$dir"
finish
