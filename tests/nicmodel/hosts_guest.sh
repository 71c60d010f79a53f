#!/usr/bin/env bash
# nicmodel_hosts' guest half, on both hosts: bench-nic-model-hosts at one footprint and one repetition, a run per path and then the paths interleaved in one run (scripts/bench's way); host A judges the rows.
set -uo pipefail
# shellcheck source=tests/support/check.sh
. "$UNLOAD_SOURCE_DIR/tests/support/check.sh"
# Both hosts write their raw logs into the pair's shared directory; A writes the rows.
# Both runs on both hosts first (each is a pair of processes, one a host); then A judges.
out=${UNLOAD_PAIR_DIR:?not in a two-host sandbox}/rows
mixed=$UNLOAD_PAIR_DIR/mixed
mkdir -p "$out" "$mixed"
"$UNLOAD_SOURCE_DIR/scripts/lib/guest/bench-nic-model-hosts" --out "$out" --build "$UNLOAD_BUILD_DIR" \
	--reps 1 --footprints 1 --warmup 512 >"$out/log.$UNLOAD_HOST" 2>&1
rc=$?
"$UNLOAD_SOURCE_DIR/scripts/lib/guest/bench-nic-model-hosts" --out "$mixed" --build "$UNLOAD_BUILD_DIR" \
	--reps 1 --footprints 1 --warmup 512 --interleave >"$mixed/log.$UNLOAD_HOST" 2>&1
rc_mixed=$?
[ "$UNLOAD_HOST" = A ] || exit $((rc || rc_mixed))
if [ "$rc" -ne 0 ]; then
	fail "bench-nic-model-hosts" "exit $rc"
	tail -5 "$out/log.A" | sed 's/^/    /'
	finish
fi
tsv=$out/nic_model_hosts.tsv
rows=$(wc -l <"$tsv")
expect "a row per model state, path and workload" "$([ "$rows" -eq 12 ] && echo 1)" "$rows of 12"
# Columns: rep model MiB path workload median p99 remote-share B's-misses-a-write.
awk_rows() { awk -F'\t' "$1" "$tsv"; }
expect "remote: every write remote" "$(awk_rows '$4 == "remote" && $8 != "1.00" {bad++} END {if (!bad) print 1}')"
expect "remote: no write translated by the target's NIC" \
	"$(awk_rows '$4 == "remote" && $9 != "0.00" {bad++} END {if (!bad) print 1}')"
expect "NIC, model off: nothing counted" \
	"$(awk_rows '$4 == "offload" && $2 == "off" && $9 != "0.00" {bad++} END {if (!bad) print 1}')"
expect "NIC, model on: the target's NIC misses (each page's first write)" \
	"$(awk_rows '$4 == "offload" && $2 == "on" && $9 + 0 > 0 {n++} END {if (n == 2) print 1}')"
# The module was told the model's size (target_xlate_pages): 1 MiB fits B's cache, and adaptive's writes stay
# on the NIC, which places them from its cache (a page joins the resident set at its second write, so the
# warm-up writes each page about twice; one its set cannot hold may go remote). Whether the set is what
# keeps them there is the policy simulator's to show (sim_resident_test).
expect "adaptive, 1 MiB random targets (B's cache holds them): on the NIC" \
	"$(awk_rows '$4 == "adaptive" && $5 == "RandomTarget" && $8 + 0 > 0.10 {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "adaptive" && $5 == "RandomTarget" {printf "model %s: remote share %s; ", $2, $8}')"
expect "its table labelled as the model's" "$(grep -q '^UNDER THE NIC MODEL' "$out/nic_model_hosts.txt" && echo 1)"

# Interleaved (--interleave): one run per model state and workload, its timed writes in
# blocks turning through the module's modes, a row per mode. Each block's paths must be
# counted in its own mode, or the shares below would be smeared across the modes.
out=$mixed
if [ "$rc_mixed" -ne 0 ]; then
	fail "bench-nic-model-hosts --interleave" "exit $rc_mixed"
	tail -5 "$out/log.A" | sed 's/^/    /'
	finish
fi
tsv=$out/nic_model_hosts.tsv
rows=$(wc -l <"$tsv")
expect "interleaved: a row per model state, mode and workload" "$([ "$rows" -eq 12 ] && echo 1)" "$rows of 12"
expect "interleaved: 4 runs, not 12" "$(n=("$out"/raw/*.json); [ "${#n[@]}" -eq 4 ] && echo 1)"
expect "interleaved: unload's blocks all remote" \
	"$(awk_rows '$4 == "remote" && $8 != "1.00" {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "remote" {printf "%s ", $8}')"
expect "interleaved: offload's blocks none remote" \
	"$(awk_rows '$4 == "offload" && $8 != "0.00" {bad++} END {if (!bad) print 1}')" \
	"$(awk_rows '$4 == "offload" {printf "%s ", $8}')"
expect "interleaved: adaptive's blocks (1 MiB) on the NIC" \
	"$(awk_rows '$4 == "adaptive" && $5 == "RandomTarget" && $8 + 0 > 0.10 {bad++} END {if (!bad) print 1}')"
expect "interleaved: the paired ratio in the table" \
	"$(grep -q 'adaptive/best on, paired' "$out/nic_model_hosts.txt" && echo 1)"
finish
