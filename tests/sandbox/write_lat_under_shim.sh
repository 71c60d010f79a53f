#!/usr/bin/env bash
# Unmodified perftest ib_write_lat (server and client on rxe0) passes under the shim with the module loaded, and its writes are counted.
. "$UNLOAD_SOURCE_DIR/tests/shim/sandbox/lib.sh"
# The one vocabulary (its check, fail and finish replace lib.sh's).
. "$UNLOAD_SOURCE_DIR/tests/support/check.sh"
command -v ib_write_lat >/dev/null || skip "perftest is not installed"
[ -e "$SHIM" ] || skip "no $SHIM"

N=200
check "ib_write_lat passes under the shim (the module's mode)" run_pair lat - \
	ib_write_lat -d "$DEV" -x "$GIDX" -s 64 -n $N -- ib_write_lat -d "$DEV" -x "$GIDX" -s 64 -n $N "$ADDR"
show_stats lat
# Each side posts one write per iteration; the shim counts every one of them, on some path.
total=0
for p in offload inline stage direct; do total=$((total + $(stat "$WORK/lat.stats" writes_$p))); done
check "writes counted by the shim: $total (expected >= $((2 * N)))" [ "$total" -ge $((2 * N)) ]
[ -r /sys/kernel/unload/stats/writes_offload ] &&
	echo "    module stats: $(cd /sys/kernel/unload/stats && grep -H . writes_* | tr '\n' ' ')"
rm -rf "$WORK"
finish
