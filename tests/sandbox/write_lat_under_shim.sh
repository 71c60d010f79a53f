#!/usr/bin/env bash
# Unmodified perftest ib_write_lat (server and client on rxe0) passes under the shim with the module loaded, and its writes are counted.
. "$UNLOAD_SOURCE_DIR/tests/shim/sandbox/lib.sh"
command -v ib_write_lat >/dev/null || { echo "SKIP: perftest is not installed"; exit 77; }
[ -e "$SHIM" ] || { echo "SKIP: no $SHIM"; exit 77; }

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
finish
