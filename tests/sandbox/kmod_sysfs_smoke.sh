#!/usr/bin/env bash
# The module is loaded: /sys/kernel/unload/mode reads, a valid write sticks, an invalid one is EINVAL and changes nothing.
set -uo pipefail
. "$(dirname "$0")/../support/check.sh"
d=/sys/kernel/unload

[ -d $d ] || { fail "$d exists" "missing"; finish; }
before=$(cat $d/mode)
echo "mode = $before"
check "mode reads a known word" eval '[[ "$before" =~ ^(offload|unload|threshold|adaptive)$ ]]'
err=$( (echo bogus >$d/mode) 2>&1)
check "writing 'bogus' is refused with EINVAL" eval '[[ "$err" == *"Invalid argument"* ]]'
check "mode unchanged after the refused write" eval '[ "$(cat $d/mode)" = "$before" ]'
echo unload >$d/mode
check "writing 'unload' sticks" eval '[ "$(cat $d/mode)" = unload ]'
echo "$before" >$d/mode
check "a statistic reads as a number" eval '[[ "$(cat $d/stats/writes_offload)" =~ ^[0-9]+$ ]]'
finish
