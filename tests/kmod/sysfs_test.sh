#!/bin/bash
# sysfs of unload.ko: every tunable round-trips, a table of bad inputs is rejected with EINVAL leaving the value unchanged, file modes (reported/ read-only), stats reset (reported/ too), the docs list every file.
set -u
. "$(dirname "$0")/../support/check.sh"
R=/sys/kernel/unload
DOC=${UNLOAD_SOURCE_DIR:-$(dirname "$0")/../..}/docs/sysfs.md
# Builtins only in the loops: TCG makes every fork expensive.
get() { read -r REPLY <"$1" || REPLY=; }
[ -d $R ] || skip "no $R (module not loaded)"

# name min max default
tunables="enabled 0 1 1
threshold_bytes 0 2147483648 1024
inline_max 0 65536 256
stage_max 0 1073741824 65536
direct_max 0 2147483648 1073741824
explore_shift 0 31 5
hysteresis_pct 0 1000 10
cpu_budget_pct 0 100 50
target_xlate_pages 0 16384 0
pair_idle_ms 1 1000 10
user_sessions_max 1 1048576 1024
user_registrations_max 1 16777216 262144
channels_max 1 65536 1024
user_channels_max 1 65536 256"

long=$(printf '9%.0s' {1..5000})
while read -r n min max def; do
	get $R/$n; v=$REPLY
	expect "default.$n" "$([ "$v" = "$def" ] && echo 1)" "$v (want $def)"
	ok=1
	for x in $min $max $(((min + max) / 2)) $def; do
		echo $x >$R/$n 2>/dev/null && get $R/$n && [ "$REPLY" = "$x" ] || ok=0
	done
	expect "roundtrip.$n" $ok "min $min max $max mid default"
	echo $def >$R/$n
	bad=0 total=0
	below=()
	[ "$min" -eq 0 ] || below=("$((min - 1))")
	for x in "${below[@]}" $'\n' "abc" "-1" "$((max + 1))" "1.5" "0x" "0x1" "18446744073709551616" \
		"99999999999999999999999" "12abc" " " "1 2" "$long"; do
		total=$((total + 1))
		if printf '%s' "$x" >$R/$n 2>/dev/null; then bad=$((bad + 1)); continue; fi
		get $R/$n; [ "$REPLY" = "$def" ] || bad=$((bad + 1))
	done
	expect "invalid.$n" "$([ $bad = 0 ] && echo 1)" "$((total - bad))/$total rejected, value kept"
done <<<"$tunables"

# decimal only: a leading zero is not octal
echo 010 >$R/hysteresis_pct 2>/dev/null; get $R/hysteresis_pct; v=$REPLY
echo 10 >$R/hysteresis_pct
expect decimal.leading_zero "$([ "$v" = 10 ] && echo 1)" "010 -> $v (want 10)"

# mode takes words
v=$(cat $R/mode)
expect default.mode "$([ "$v" = adaptive ] && echo 1)" "$v (want adaptive)"
ok=1
for m in offload unload threshold adaptive; do
	echo $m >$R/mode && get $R/mode && [ "$REPLY" = $m ] || ok=0
done
expect roundtrip.mode $ok "offload unload threshold adaptive"
bad=0 total=0
for x in $'\n' bogus 0 3 Offload "offload2" "unloadx" " adaptive"; do
	total=$((total + 1))
	if printf '%s' "$x" >$R/mode 2>/dev/null; then bad=$((bad + 1)); continue; fi
	get $R/mode; [ "$REPLY" = adaptive ] || bad=$((bad + 1))
done
expect invalid.mode "$([ $bad = 0 ] && echo 1)" "$((total - bad))/$total rejected, value kept"
err=$( (echo bogus >$R/mode) 2>&1)
expect invalid.mode_errno "$(echo "$err" | grep -q 'Invalid argument' && echo 1)" "${err##*: }"

# modes: nothing world-writable; stats read-only but reset write-only
ww=$(find $R -type f -perm -o+w | wc -l)
expect modes.no_world_writable "$([ "$ww" = 0 ] && echo 1)" "$ww world-writable files"
ro=$(find $R/stats -type f ! -name reset -perm /222 | wc -l)
expect modes.stats_read_only "$([ "$ro" = 0 ] && echo 1)" "$ro writable statistics"
ro=$(find $R/reported -type f ! -perm 0444 | wc -l)
nr=$(find $R/reported -type f | wc -l)
expect modes.reported_0444 "$([ "$ro" = 0 ] && [ "$nr" -gt 0 ] && echo 1)" "$ro of $nr reported files not 0444"
dn=$(find $R/stats -type f -name 'direct_denied_*' ! -perm 0400 | wc -l)
nd=$(find $R/stats -type f -name 'direct_denied_*' | wc -l)
expect modes.reasons_root_only "$([ "$dn" = 0 ] && [ "$nd" -gt 0 ] && echo 1)" "$dn of $nd reason files not 0400"
rm=$(stat -c %a $R/stats/reset)
expect modes.reset "$([ "$rm" = 200 ] && echo 1)" "mode $rm"

# reset
acc=0
for x in 0 2 abc $'\n' -1; do printf '%s' "$x" >$R/stats/reset 2>/dev/null && acc=$((acc + 1)); done
expect invalid.reset "$([ $acc = 0 ] && echo 1)" "$((5 - acc))/5 rejected"
echo 1 >$R/stats/reset
nz=0
for f in $R/stats/* $R/reported/*; do  # builtins: an exec a counter cost seconds under TCG
	case ${f##*/} in reset | sessions | pinned_pages) continue ;; esac
	read -r v <"$f"
	[ "$v" = 0 ] || nz=$((nz + 1))
done
expect stats.reset "$([ $nz = 0 ] && echo 1)" "$nz counters non-zero after reset"
s=$(cat $R/stats/sessions)
exec 7</dev/unload
s1=$(cat $R/stats/sessions)
exec 7<&-
s2=$(cat $R/stats/sessions)
expect stats.sessions "$([ $((s1 - s)) = 1 ] && [ "$s2" = "$s" ] && echo 1)" "$s -> $s1 -> $s2"

# documentation lists every file
missing="" doc=
[ -r "$DOC" ] && IFS= read -r -d '' doc <"$DOC"
for f in $(cd $R && find . -type f | sed 's|^\./||'); do
	[[ $doc == *"\`$f\`"* ]] || missing="$missing $f"
done
expect docs.every_file "$([ -z "$missing" ] && echo 1)" "missing:${missing:- none}"
finish
