#!/bin/bash
# Memory is charged once: kmod_limits memlock runs without the shim and under
# it (UNLOAD_MODE=unload: its writes go direct), as uid 65534 with an 8 MiB
# RLIMIT_MEMLOCK; both runs must pass.
# Usage: memlock_test.sh <kmod_limits binary>
set -u
BIN=$1
BUILD=${UNLOAD_BUILD_DIR:?UNLOAD_BUILD_DIR is not set (run through ctest)}
SHIM=$BUILD/shim/libunload_shim.so
[ -e /dev/unload ] || { echo "skip: no /dev/unload (module not loaded)"; exit 77; }
[ -e "$SHIM" ] || { echo "skip: no $SHIM"; exit 77; }
fail=0
echo "== no shim"
"$BIN" memlock || fail=$((fail + 1))
echo "== shim, UNLOAD_MODE=unload"
W=$(mktemp -d /tmp/memlock.XXXXXX)
chmod 0777 "$W"
env LD_PRELOAD="$SHIM" UNLOAD_MODE=unload UNLOAD_STATS_FILE="$W/stats" "$BIN" memlock || fail=$((fail + 1))
d=$(awk '$1 == "writes_direct" { s += $2 } END { print s + 0 }' "$W/stats" 2>/dev/null)
printf 'check %-40s %s ... %s\n' memlock.went_direct "writes_direct $d" "$([ "${d:-0}" -ge 1 ] && echo ok || echo FAIL)"
[ "${d:-0}" -ge 1 ] || fail=$((fail + 1))
echo "$([ $fail = 0 ] && echo PASS || echo FAIL): $fail failed runs"
[ $fail = 0 ]
