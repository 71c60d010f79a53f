#!/usr/bin/env bash
# The module is loaded: /sys/kernel/unload/mode reads, a valid write sticks, an invalid one is EINVAL and changes nothing.
set -uo pipefail
d=/sys/kernel/unload
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

[ -d $d ] || { echo "FAIL: $d missing"; exit 1; }
before=$(cat $d/mode)
echo "mode = $before"
check "mode reads a known word" '[[ "$before" =~ ^(offload|unload|threshold|adaptive)$ ]]'
err=$( (echo bogus >$d/mode) 2>&1)
check "writing 'bogus' is refused with EINVAL" '[[ "$err" == *"Invalid argument"* ]]'
check "mode unchanged after the refused write" '[ "$(cat $d/mode)" = "$before" ]'
echo unload >$d/mode
check "writing 'unload' sticks" '[ "$(cat $d/mode)" = unload ]'
echo "$before" >$d/mode
check "a statistic reads as a number" '[[ "$(cat $d/stats/writes_offload)" =~ ^[0-9]+$ ]]'
exit $fail
