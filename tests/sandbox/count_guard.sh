#!/usr/bin/env bash
# The shim's instructions a write, counted by callgrind (scripts/bench --count's rows at one
# QP but adaptive's, and the NIC row at 1024, the least of three runs), hold their recorded figures (bench/verbs/count_recorded.json):
# within 15 %, the default mode's rows within their own tolerance, and some rows' poll alone
# (recorded_poll: a completion no tag names passes the merger by); and the method counts
# nothing without the shim. A count, never a timing: offload's and mapped's are the same
# every run, the default mode's move with what its policy measured (by a tenth on a quiet
# host, by half beside a CI run), hence the least of three and the wider bound.
set -uo pipefail
. "$(dirname "$0")/../support/check.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${UNLOAD_BUILD_DIR:?}
[ -e /dev/unload ] || skip "the module is not loaded"
[ -x "$build/bench/verbs/bench_write_count" ] || skip "no bench_write_count (valgrind's header missing at build)"
command -v valgrind >/dev/null || skip "no valgrind here (scripts/setup installs it)"
dir=$(mktemp -d)
# Each row's line as it ends, so a run stopped by its time limit shows the row it was on.
"$root/scripts/lib/guest/bench-count" --out "$dir" --build "$build" \
	--rows "noshim offload sysoffload inline nic nic.q1024 random mapped" --writes 300 --repeat 3 2>&1 |
	tee "$dir/log" | sed -u 's/^/  /'
if [ "${PIPESTATUS[0]}" != 0 ]; then
	fail "every row counted" "$(tail -5 "$dir/log")"
	finish
fi
python3 "$root/scripts/lib/python/count_report.py" "$dir" --check "$root/bench/verbs/count_recorded.json" \
	>"$dir/report"
rc=$?
sed 's/^/  /' "$dir/report"
noshim=$(awk -F'\t' '$1 == "noshim" { print $5 }' "$dir/count.tsv")
expect "without the shim the count is zero" "$([ "${noshim%.*}" = 0 ] && echo 1)" "${noshim:-none}"
# The rows over, named in the check itself: a CI log cut short still says which.
over=$(sed -n 's/^FAIL: //p' "$dir/report" | paste -sd';' -)
expect "no row rose over its bound (15 %, or the row's own)" "$([ "$rc" = 0 ] && echo 1)" \
	"${over:-every row within it}"
rm -rf "$dir"
finish
