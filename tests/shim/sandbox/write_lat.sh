#!/bin/bash
# Unmodified perftest ib_write_lat (server and client on rxe0) under the shim, per mode; the stats file shows the path.
. "$(dirname "$0")/lib.sh"
need_shim

N=200
lat() { run_pair "$1" "$2" ib_write_lat -d "$DEV" -x "$GIDX" -n $N -s "$3" -- ib_write_lat -d "$DEV" -x "$GIDX" -n $N -s "$3" "$ADDR"; }

check "offload 64B: ib_write_lat passes" lat off64 offload 64
show_stats off64
check "offload 64B: writes counted on offload" [ "$(stat "$WORK/off64.stats" writes_offload)" -ge $((2 * N)) ]
check "offload 64B: no other path" [ "$(($(stat "$WORK/off64.stats" writes_inline) + $(stat "$WORK/off64.stats" writes_stage) + $(placed_here "$WORK/off64.stats")))" -eq 0 ]
check "offload 64B: bytes = 64 x writes" [ "$(stat "$WORK/off64.stats" bytes_offload)" -eq $((64 * $(stat "$WORK/off64.stats" writes_offload))) ]
check "offload: notice printed once per process" [ "$(grep -c 'kernel module not available' "$WORK/off64.srv")" -eq 1 ]

check "unload 64B: ib_write_lat passes" lat un64 unload 64
show_stats un64
check "unload 64B: writes took unload.inline" [ "$(stat "$WORK/un64.stats" writes_inline)" -ge $((2 * N)) ]
check "unload 64B: none offloaded" [ "$(stat "$WORK/un64.stats" writes_offload)" -eq 0 ]

check "unload 8KiB: ib_write_lat passes" lat un8k unload 8192
show_stats un8k
check "unload 8KiB: too big for inline, offloaded" [ "$(stat "$WORK/un8k.stats" writes_offload)" -ge $((2 * N)) ]

check "threshold 64B: ib_write_lat passes" lat th64 threshold 64
show_stats th64
check "threshold 64B: inline" [ "$(stat "$WORK/th64.stats" writes_inline)" -ge $((2 * N)) ]
export UNLOAD_THRESHOLD_BYTES=32
check "threshold=32, 64B: ib_write_lat passes" lat th64b threshold 64
show_stats th64b
check "threshold=32, 64B: offload" [ "$(stat "$WORK/th64b.stats" writes_offload)" -ge $((2 * N)) ]
unset UNLOAD_THRESHOLD_BYTES
finish
