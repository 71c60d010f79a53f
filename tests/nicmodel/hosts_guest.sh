#!/usr/bin/env bash
# nicmodel_hosts' guest half, on both hosts: bench-nic-model-hosts at one footprint and one repetition, the model on, a run per path (random targets, the miss calibrated to a NIC write) and then the paths interleaved in one run (scripts/bench's way); host A judges the rows.
set -uo pipefail
# shellcheck source=tests/support/check.sh
. "$UNLOAD_SOURCE_DIR/tests/support/check.sh"
# Both hosts write their raw logs into the pair's shared directory; A writes the rows.
# Both runs on both hosts first (each is a pair of processes, one a host); then A judges.
# Only the model on: with it off, rxe counts nothing (nicmodel's own test) and the paths
# differ by what is checked here already.
out=${UNLOAD_PAIR_DIR:?not in a two-host sandbox}/rows
mixed=$UNLOAD_PAIR_DIR/mixed
mkdir -p "$out" "$mixed"
bench=("$UNLOAD_SOURCE_DIR/scripts/lib/guest/bench-nic-model-hosts" --build "$UNLOAD_BUILD_DIR"
	--reps 1 --footprints 1 --warmup 512 --models on)
"${bench[@]}" --out "$out" --workloads RandomTarget --miss-ns write >"$out/log.$UNLOAD_HOST" 2>&1
rc=$?
"${bench[@]}" --out "$mixed" --interleave >"$mixed/log.$UNLOAD_HOST" 2>&1
rc_mixed=$?
[ "$UNLOAD_HOST" = A ] || exit $((rc || rc_mixed))

# rows_of WHAT RC DIR N: a run's rows (tsv, awk_rows) once it passed with N of them.
rows_of() {
	if [ "$2" -ne 0 ]; then
		fail "$1" "exit $2"
		tail -5 "$3/log.A" | sed 's/^/    /'
		finish
	fi
	tsv=$3/nic_model_hosts.tsv
	rows=$(wc -l <"$tsv")
	expect "$1: a row per path and workload" "$([ "$rows" -eq "$4" ] && echo 1)" "$rows of $4"
}
# Columns: rep model MiB path workload median p99 remote-share B's-misses-a-write.
awk_rows() { awk -F'\t' "$1" "$tsv"; }

# A run per path, model on, random targets: B's translation misses are each run's own.
rows_of "bench-nic-model-hosts" "$rc" "$out" 3
expect "remote: every write remote" "$(awk_rows '$4 == "remote" && $8 != "1.00" {bad++} END {if (!bad) print 1}')"
expect "remote: no write translated by the target's NIC" \
	"$(awk_rows '$4 == "remote" && $9 != "0.00" {bad++} END {if (!bad) print 1}')"
expect "NIC: the target's NIC misses (each page's first write)" \
	"$(awk_rows '$4 == "offload" && $9 + 0 > 0 {n++} END {if (n == 1) print 1}')"
# The module was told the model's size (target_xlate_pages): 1 MiB fits B's cache, and adaptive's writes stay
# on the NIC, which places them from its cache (a page joins the resident set at its second write, so the
# warm-up writes each page about twice; one its set cannot hold may go remote). Whether the set is what
# keeps them there is the policy simulator's to show (sim_resident_test).
expect "adaptive, 1 MiB random targets (B's cache holds them): on the NIC" \
	"$(awk_rows '$4 == "adaptive" && $8 + 0 > 0.10 {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "adaptive" {printf "remote share %s", $8}')"
expect "its table labelled as the model's" "$(grep -q '^UNDER THE NIC MODEL' "$out/nic_model_hosts.txt" && echo 1)"
# --miss-ns write: the miss is one NIC write's cost, measured first in this boot, and the
# report says the ratio its rows were measured at.
{ read -r miss write <"$out/nic_model_hosts.miss"; } 2>/dev/null
expect "a miss calibrated to one NIC write (the model off)" \
	"$([[ "$miss" =~ ^[1-9][0-9]*$ ]] && [ "$miss" = "$write" ] && echo 1)" "miss ${miss:-none} ns, write ${write:-none} ns"
expect "the report headed by its ratio" \
	"$(head -1 "$out/nic_model_hosts.txt" | grep -q "^a miss at the target's NIC: .* us, [0-9.]*x a NIC write here" && echo 1)" \
	"$(head -1 "$out/nic_model_hosts.txt")"

# Interleaved (--interleave): one run per workload, its timed writes in blocks turning
# through the module's modes, a row per mode. Each block's paths must be counted in its
# own mode, or the shares below would be smeared across the modes.
rows_of "bench-nic-model-hosts --interleave" "$rc_mixed" "$mixed" 6
expect "interleaved: 2 runs, not 6" "$(n=("$mixed"/raw/*.json); [ "${#n[@]}" -eq 2 ] && echo 1)"
expect "interleaved: unload's blocks all remote" \
	"$(awk_rows '$4 == "remote" && $8 != "1.00" {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "remote" {printf "%s ", $8}')"
expect "interleaved: offload's blocks none remote" \
	"$(awk_rows '$4 == "offload" && $8 != "0.00" {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "offload" {printf "%s ", $8}')"
expect "interleaved: adaptive's blocks (1 MiB) on the NIC" \
	"$(awk_rows '$4 == "adaptive" && $5 == "RandomTarget" && $8 + 0 > 0.10 {bad++} END {if (!bad) print 1}')"
expect "interleaved: the paired ratio in the table" \
	"$(grep -q 'adaptive/best on, paired' "$mixed/nic_model_hosts.txt" && echo 1)"
finish
